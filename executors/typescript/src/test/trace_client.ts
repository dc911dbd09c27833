// A client for the Go-driven test of trace propagation
// (integration/typescript_lazy_test.go): it creates three tasks on
// TRACE_QUEUE, titled by where their traceparent comes from — the
// environment (TRACEPARENT), the client's option (TRACE_OPTION) and one
// call's (TRACE_CALL) — and a fourth, "none", with the call's "" (none).
//
// Environment: DWR_SERVER, DWR_CREDS, TRACE_QUEUE, TRACEPARENT, TRACE_OPTION,
// TRACE_CALL.
import { Client } from "../index.js";
import { needEnv, runProgram } from "../program.js";

const need = (name: string) => needEnv("trace_client", name);

async function main() {
  const server = need("DWR_SERVER");
  const creds = need("DWR_CREDS");
  const queue = need("TRACE_QUEUE");
  const fromEnv = await Client.connect(server, { creds });
  await fromEnv.createTask({ queue, title: "env" });
  await fromEnv.createTask({ queue, title: "call" }, { traceparent: need("TRACE_CALL") });
  await fromEnv.createTask({ queue, title: "none" }, { traceparent: "" });
  const withOption = new Client(fromEnv.nc, { traceparent: need("TRACE_OPTION") });
  await withOption.createTask({ queue, title: "option" });
  await fromEnv.close();
}

runProgram("trace_client", main);
