# The 10-million-message scale check (one hot address with half the traffic, default Spark memory).
.PHONY: scale-check
scale-check: setup
	$(VENV)/bin/python -m msgdedup.bench.scale_check
