"""Reports: tables (markdown, CSV, LaTeX) and plots rebuilt from stored run records."""
from seq2seq_zoo.report.build import build_report  # noqa: F401
