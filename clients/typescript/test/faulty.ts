// A fault injector in front of the real service, on 127.0.0.1: it answers the first
// requests itself (a status, or never) and forwards the rest to the service unchanged.
import { type IncomingMessage, type ServerResponse, createServer } from "node:http";
import type { AddressInfo } from "node:net";

export interface Fault {
  /** Answer this status (with the service's error shape), or hang until closed. */
  status: number | "hang";
  retryAfter?: string;
}

export interface FaultyProxy {
  url: string;
  /** Requests seen, faulty or forwarded. */
  requests: number;
  close(): Promise<void>;
}

export async function faultyProxy(target: string, faults: Fault[]): Promise<FaultyProxy> {
  const pending = [...faults];
  const hanging = new Set<ServerResponse>();
  const state = { requests: 0 };
  const server = createServer(async (request: IncomingMessage, response: ServerResponse) => {
    state.requests++;
    const chunks: Buffer[] = [];
    for await (const chunk of request) chunks.push(chunk as Buffer);
    const fault = pending.shift();
    if (fault?.status === "hang") {
      hanging.add(response);
      return;
    }
    if (fault) {
      response.writeHead(fault.status, {
        "Content-Type": "application/json",
        ...(fault.retryAfter === undefined ? {} : { "Retry-After": fault.retryAfter }),
      });
      response.end(JSON.stringify({ error: { code: "lake_unavailable",
                                             message: `injected ${fault.status}` } }));
      return;
    }
    const headers: Record<string, string> = {};
    for (const name of ["authorization", "content-type", "accept"]) {
      const value = request.headers[name];
      if (typeof value === "string") headers[name] = value;
    }
    const forwarded = await fetch(`${target}${request.url}`, {
      method: request.method, headers,
      body: chunks.length ? Buffer.concat(chunks) : undefined,
    });
    response.writeHead(forwarded.status, {
      "Content-Type": forwarded.headers.get("content-type") ?? "application/octet-stream",
    });
    response.end(Buffer.from(await forwarded.arrayBuffer()));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    get requests() {
      return state.requests;
    },
    close: () => new Promise<void>((resolve) => {
      for (const response of hanging) response.destroy();
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
}
