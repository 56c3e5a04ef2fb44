#!/usr/bin/env bash
# Compile the project's JVM code (src/msgdedup/jvm/*.java) into src/msgdedup/jvm/msgdedup-jvm.jar.
#
# javac against the jars of the venv's pyspark, so the classes are built for the Spark that runs
# them; no Maven (out of reach here). Needs a JDK's javac and jar (Debian: openjdk-17-jdk-headless).
set -euo pipefail
venv="$(cd "${1:-.venv}" && pwd)"
src="$(cd "$(dirname "$0")/../src" && pwd)"
jar="$src/msgdedup/jvm/msgdedup-jvm.jar"
spark_home="$("$venv/bin/python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
for tool in javac jar; do
  if ! command -v "$tool" >/dev/null; then
    echo "build_jvm.sh: $tool not found: install a JDK 17 (Debian: openjdk-17-jdk-headless)" >&2
    exit 1
  fi
done
classes="$(mktemp -d)"
trap 'rm -rf "$classes"' EXIT
javac -nowarn -Xlint:-options --release 17 -encoding UTF-8 -cp "$spark_home/jars/*" -d "$classes" \
  "$src"/msgdedup/jvm/*.java
# written beside, then moved: a half-written jar is never found by a running application
jar --create --file "$jar.tmp" -C "$classes" .
mv "$jar.tmp" "$jar"
echo "built $jar"
