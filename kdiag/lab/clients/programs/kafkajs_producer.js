// A kafkajs producer with the library's defaults (kdiag.lab.clients).
// argv: BOOTSTRAP TOPIC CA MESSAGES MODE; CA empty for plaintext.
const fs = require("fs");
const { Kafka, logLevel } = require("kafkajs");

const [bootstrap, topic, ca, n, mode] = process.argv.slice(-5);
const kafka = new Kafka({ brokers: [bootstrap], logLevel: logLevel.NOTHING,
                          ssl: ca ? { ca: [fs.readFileSync(ca)] } : false });
(async () => {
  const p = kafka.producer();
  await p.connect();
  const message = { topic, messages: [{ value: "x".repeat(100) }] };
  if (mode === "each") {
    for (let i = 0; i < Number(n); i++) await p.send(message);
  } else if (mode === "steady") {
    let closed = false;
    process.stdin.on("end", () => { closed = true; });
    process.stdin.resume();
    while (!closed) {
      await p.send(message);
      await new Promise((done) => setTimeout(done, Number(n)));
    }
  } else {
    const sends = [];
    for (let i = 0; i < Number(n); i++) sends.push(p.send(message));
    await Promise.all(sends);
  }
  if (mode === "each" || mode === "steady") {
    // A producer stays up: its sockets are sampled (TCP_INFO) while it does.
    await new Promise((done) => setTimeout(done, 1000));
  } else {
    console.log("READY", `kafkajs ${require("kafkajs/package.json").version} (node ${process.version})`);
    process.stdin.resume();
    await new Promise((done) => process.stdin.on("end", done));
  }
  await p.disconnect();
})().catch((e) => { console.error(String(e)); process.exit(1); });
