package msgdedup.jvm;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadFeature;
import java.io.IOException;
import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;

/**
 * The envelope's fields of a raw line, read in one pass of Jackson's streaming parser, or null
 * when the line is not certainly valid (msgdedup.engine.parsing then gives it to the envelope's
 * Python decoder, which decides and words the error).
 *
 * <p>Why our own code: Spark's functions need a regular expression (to refuse trailing junk and
 * to check each field's type), try_parse_json (to refuse a repeated key) and a VARIANT cast per
 * value, about 4 s per million lines on two cores; this is under 1 s. Jackson ships with Spark.
 *
 * <p>Null (the slow way) for anything the two decoders might read differently: a backslash-u escape
 * (lone surrogates), a control character, a byte order mark or anything before the object, a
 * field the envelope does not know, a value of another type or null, a float, an integer of
 * more than 18 digits, a nested value in the properties, a repeated key, trailing content.
 * The Python test tests/engine/test_parsing.py holds the two decoders to the same values.
 */
public final class EnvelopeFields implements UDF1<byte[], Row> {
  private static final long serialVersionUID = 1L;

  // Strict JSON is Jackson's default (no comments, NaN, leading zeros, single quotes...);
  // property names are not interned: a batch may hold many distinct ones.
  private static final JsonFactory JSON = JsonFactory.builder()
      .enable(StreamReadFeature.STRICT_DUPLICATE_DETECTION)
      .disable(JsonFactory.Feature.INTERN_FIELD_NAMES)
      .build();

  private static final int MAX_DIGITS = 18;  // always a long, in Java and in the envelope

  @Override
  public Row call(byte[] line) {
    if (line == null || !plain(line)) {
      return null;
    }
    try (JsonParser parser = JSON.createParser(line)) {
      return fields(parser);
    } catch (IOException | RuntimeException e) {
      return null;  // whatever Jackson refuses (or a fault here): the envelope decides the line
    }
  }

  /** No control character but JSON's whitespace, no backslash-u escape, the object first. */
  private static boolean plain(byte[] line) {
    int first = -1;
    for (int i = 0; i < line.length; i++) {
      byte b = line[i];
      if (b >= 0 && b < 0x20 && b != '\t' && b != '\n' && b != '\r') {
        return false;
      }
      if (b == '\\' && i + 1 < line.length && line[i + 1] == 'u') {
        return false;
      }
      if (first < 0 && b != ' ' && b != '\t' && b != '\n' && b != '\r') {
        first = i;
      }
    }
    return first >= 0 && line[first] == '{';
  }

  private static Row fields(JsonParser p) throws IOException {
    if (p.nextToken() != JsonToken.START_OBJECT) {
      return null;
    }
    String messageId = null, address = null, receivedIso = null;
    String txnId = null, sourceId = null, body = null;
    Long receivedMs = null, seq = null;
    Map<String, String> properties = null;
    JsonToken token;
    while ((token = p.nextToken()) == JsonToken.FIELD_NAME) {
      String name = p.currentName();
      JsonToken value = p.nextToken();
      switch (name) {
        case "message_id": messageId = string(p, value); break;
        case "address": address = string(p, value); break;
        case "txn_id": txnId = string(p, value); break;
        case "source_id": sourceId = string(p, value); break;
        case "body": body = string(p, value); break;
        case "received_at":
          if (value == JsonToken.VALUE_STRING) {
            receivedIso = p.getText();
          } else {
            receivedMs = integer(p, value);
          }
          break;
        case "seq": seq = integer(p, value); break;
        case "properties": properties = properties(p, value); break;
        default: return null;
      }
    }
    if (token != JsonToken.END_OBJECT || p.nextToken() != null) {
      return null;
    }
    // a missing or empty required field: parsing.fast_parse sends the line the slow way
    return RowFactory.create(messageId, address, receivedIso, receivedMs, properties, txnId,
        sourceId, seq, body);
  }

  private static String string(JsonParser p, JsonToken value) throws IOException {
    if (value != JsonToken.VALUE_STRING) {
      throw new NotCertain();
    }
    return p.getText();
  }

  private static Long integer(JsonParser p, JsonToken value) throws IOException {
    if (value != JsonToken.VALUE_NUMBER_INT) {
      throw new NotCertain();
    }
    char[] text = p.getTextCharacters();
    int digits = p.getTextLength() - (text[p.getTextOffset()] == '-' ? 1 : 0);
    if (digits > MAX_DIGITS) {
      throw new NotCertain();
    }
    return p.getLongValue();
  }

  /** A flat object of strings and integers; the integers as the envelope writes them. */
  private static Map<String, String> properties(JsonParser p, JsonToken value) throws IOException {
    if (value != JsonToken.START_OBJECT) {
      throw new NotCertain();
    }
    Map<String, String> properties = new LinkedHashMap<>();  // the line's order, as in Python
    JsonToken token;
    while ((token = p.nextToken()) == JsonToken.FIELD_NAME) {
      String key = p.currentName();
      JsonToken v = p.nextToken();
      properties.put(key, v == JsonToken.VALUE_STRING ? p.getText() : Long.toString(integer(p, v)));
    }
    if (token != JsonToken.END_OBJECT) {
      throw new NotCertain();
    }
    return properties;
  }

  /** The line goes the slow way. */
  private static final class NotCertain extends RuntimeException {
    private static final long serialVersionUID = 1L;

    NotCertain() {
      super(null, null, false, false);  // no stack trace: a control-flow signal, often thrown
    }
  }
}
