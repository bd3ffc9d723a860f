"""kafka-python, pure Python: a thread per producer sends each request with
one socket send() (plaintext) or SSLSocket.send() (TLS)."""
NAME = "kafka-python"
RUNTIME = "python"
MODULE = "kafka"
INSTALL = "pip install kafka-python"
PROGRAM = "kafka_python_producer.py"
