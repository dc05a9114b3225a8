//! Media types, status codes and header fields between HTTP and CoAP (RFC 8075 §6-§7).
