from seq2seq_zoo.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
