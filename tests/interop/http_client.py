"""An HTTP/1.1 client for the cross-proxy tests (tests/http_cross_proxy.rs): Python's own
http.client, one keep-alive connection for every request.

Usage: http_client.py HOST:PORT REQUESTS_JSON
  REQUESTS_JSON: a list of {"method", "path", "headers": {...}, "body_hex"} objects.
Prints per response `RESPONSE <status>`, a `HEADER <name, lowercased>: <value>` line per
field and `BODY <hex>`; then `CONNECTIONS <n>`: how many TCP connections were used (1 when
keep-alive held).
"""

import http.client
import json
import sys


def main():
    host, port = sys.argv[1].rsplit(":", 1)
    requests = json.loads(sys.argv[2])
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    sockets = set()
    for r in requests:
        body = bytes.fromhex(r.get("body_hex", "")) or None
        conn.request(r["method"], r["path"], body=body, headers=r.get("headers", {}))
        sockets.add(id(conn.sock))
        resp = conn.getresponse()
        data = resp.read()
        print("RESPONSE", resp.status)
        for name, value in resp.getheaders():
            print("HEADER %s: %s" % (name.lower(), value))
        print("BODY", data.hex(), flush=True)
    print("CONNECTIONS", len(sockets), flush=True)
    conn.close()


if __name__ == "__main__":
    main()
