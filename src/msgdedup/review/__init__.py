"""What the "Data quality" view computes for review: trends over batches (``trends``), the
pages of one batch's dropped messages, quarantined lines and rejected transactions
(``drilldown``), and server-side SVG charts (``charts``). Pure functions of the warehouse; the
web app (``msgdedup.orchestration.quality_view``) only renders and routes."""
