"""The report as pages a person reads in a browser: ``results/<experiment>/report.html`` (``page``) and
``results/index.html`` (``index``), self-contained and offline. ``marks`` is the copied-word rule the
pages' script applies, ``extract`` reads what they show from the stored files, ``svg`` draws the charts."""
from seq2seq_zoo.report.html.index import INDEX_FILE, write_index  # noqa: F401
from seq2seq_zoo.report.html.page import BUDGET, PAGE_FILE, write_page  # noqa: F401
