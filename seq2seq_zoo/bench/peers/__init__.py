"""The peers `zoo bench` measures ours against: Hugging Face BART (``hf``) and eole (``eole``)."""
