//! The HTTP request target to CoAP target mapping (RFC 8075 §5).
