# An aiokafka producer with the library's defaults (kdiag.lab.clients).
# argv: BOOTSTRAP TOPIC CA MESSAGES MODE; CA empty for plaintext.
import asyncio
import sys

import aiokafka
from aiokafka.helpers import create_ssl_context

bootstrap, topic, ca, n, mode = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]


async def main():
    conf = {"bootstrap_servers": bootstrap}
    if ca:
        conf.update({"security_protocol": "SSL", "ssl_context": create_ssl_context(cafile=ca)})
    p = aiokafka.AIOKafkaProducer(**conf)
    await p.start()
    try:
        if mode == "each":
            for _ in range(n):
                await p.send_and_wait(topic, b"x" * 100)
        elif mode == "steady":
            closed = asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
            while not closed.done():
                await p.send_and_wait(topic, b"x" * 100)
                await asyncio.sleep(n / 1000.0)
        else:
            await asyncio.gather(*[await p.send(topic, b"x" * 100) for _ in range(n)])
        if mode in ("each", "steady"):
            # A producer stays up: its sockets are sampled (TCP_INFO) while it does.
            await asyncio.sleep(1)
        else:
            print("READY", f"aiokafka {aiokafka.__version__}", flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    finally:
        await p.stop()

asyncio.run(main())
