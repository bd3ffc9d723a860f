"""aiokafka, asyncio: each request is written through the event loop's
transport, plaintext or TLS (the ssl module's memory BIO)."""
NAME = "aiokafka"
RUNTIME = "python"
MODULE = "aiokafka"
INSTALL = "pip install aiokafka"
PROGRAM = "aiokafka_producer.py"
