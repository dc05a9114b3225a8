use super::*;

const FORWARD: Mapping = Mapping::Forward {
    prefix: DEFAULT_PREFIX,
};
const BOTH: Mapping = Mapping::Both {
    prefix: DEFAULT_PREFIX,
};

fn proxy_uri(target: &str) -> Result<String, UriError> {
    match coap_target(target, &FORWARD)? {
        CoapTarget::Forward { proxy_uri } => Ok(proxy_uri),
        other => panic!("{target}: not forward: {other:?}"),
    }
}

/// Uri-Path and Uri-Query option values.
type Options = (Vec<Vec<u8>>, Vec<Vec<u8>>);

fn reverse_options(target: &str) -> Result<Options, UriError> {
    match coap_target(target, &Mapping::Reverse)? {
        CoapTarget::Reverse { path, query } => Ok((path, query)),
        other => panic!("{target}: not reverse: {other:?}"),
    }
}

fn bytes(items: &[&str]) -> Vec<Vec<u8>> {
    items.iter().map(|s| s.as_bytes().to_vec()).collect()
}

#[test]
fn the_default_mapping_appends_the_target_uri_to_the_prefix() {
    let uri = proxy_uri("/hc/coap://s.example.com:5690/light?on").unwrap();
    assert_eq!(uri, "coap://s.example.com:5690/light?on");
    assert_eq!(proxy_uri("/hc/coap://h").unwrap(), "coap://h");
}

#[test]
fn the_scheme_and_host_are_lowercased() {
    let uri = proxy_uri("/hc/COAP://Sensor.EXAMPLE/Temp").unwrap();
    assert_eq!(uri, "coap://sensor.example/Temp");
}

#[test]
fn a_bracketed_ipv6_target_is_unescaped() {
    let uri = proxy_uri("/hc/coap://%5B2001:DB8::1%5D/light?on").unwrap();
    assert_eq!(uri, "coap://[2001:db8::1]/light?on");
    let uri = proxy_uri("/hc/coap://%5b::1%5d:5684/x").unwrap();
    assert_eq!(uri, "coap://[::1]:5684/x");
}

#[test]
fn raw_ipv6_brackets_are_accepted_too() {
    assert_eq!(proxy_uri("/hc/coap://[::1]/x").unwrap(), "coap://[::1]/x");
}

#[test]
fn a_bracketed_host_must_be_an_ipv6_address() {
    for target in [
        "/hc/coap://%5Bnot-v6%5D/x",
        "/hc/coap://[::1/x",
        "/hc/coap://[::1]x/",
        "/hc/coap://h]/x",
        "/hc/coap://h[1]/x",
        "/hc/coap://[]/x",
    ] {
        assert_eq!(proxy_uri(target), Err(UriError::BadHost), "{target}");
    }
}

#[test]
fn percent_encoding_hex_digits_become_uppercase() {
    let uri = proxy_uri("/hc/coap://h/a%2fb?x=%c3%a9").unwrap();
    assert_eq!(uri, "coap://h/a%2Fb?x=%C3%A9");
}

#[test]
fn an_escaped_unreserved_character_is_decoded() {
    let uri = proxy_uri("/hc/coap://%68ost/%7Euser%2Dx?%41").unwrap();
    assert_eq!(uri, "coap://host/~user-x?A");
}

#[test]
fn bytes_a_uri_may_not_hold_raw_are_escaped() {
    let uri = proxy_uri("/hc/coap://h/a|b\"c?q=<é>").unwrap();
    assert_eq!(uri, "coap://h/a%7Cb%22c?q=%3C%C3%A9%3E");
}

#[test]
fn an_empty_query_is_dropped() {
    assert_eq!(proxy_uri("/hc/coap://h/a?").unwrap(), "coap://h/a");
}

#[test]
fn a_target_without_scheme_is_refused() {
    for target in [
        "/hc/s.example.com/light",
        "/hc/",
        "/hc///h/x",
        "/hc/1coap://h/",
    ] {
        assert_eq!(proxy_uri(target), Err(UriError::MissingScheme), "{target}");
    }
}

#[test]
fn only_the_coap_scheme_is_forwarded() {
    assert_eq!(
        proxy_uri("/hc/coaps://h/x"),
        Err(UriError::CoapsUnsupported)
    );
    assert_eq!(UriError::CoapsUnsupported.http_status(), 501);
    for target in ["/hc/http://h/x", "/hc/coap+tcp://h/x"] {
        assert_eq!(
            proxy_uri(target),
            Err(UriError::UnsupportedScheme),
            "{target}"
        );
    }
}

#[test]
fn a_fragment_is_refused() {
    assert_eq!(proxy_uri("/hc/coap://h/x#f"), Err(UriError::Fragment));
    assert_eq!(
        coap_target("/x#", &Mapping::Reverse),
        Err(UriError::Fragment)
    );
}

#[test]
fn a_malformed_escape_is_refused_everywhere() {
    for target in [
        "/hc/coap://h/%zz",
        "/hc/coap://h/%4",
        "/hc/coap://h%/",
        "/h%c/coap://h/",
    ] {
        assert_eq!(
            proxy_uri(target),
            Err(UriError::BadPercentEncoding),
            "{target}"
        );
    }
    assert_eq!(
        reverse_options("/a?b=%g0"),
        Err(UriError::BadPercentEncoding)
    );
}

#[test]
fn the_port_is_a_number_from_1_to_65535() {
    assert_eq!(proxy_uri("/hc/coap://h:65535/").unwrap(), "coap://h:65535/");
    assert_eq!(proxy_uri("/hc/coap://h:007/").unwrap(), "coap://h:7/");
    for port in ["0", "65536", "", "+5", "5a", "123456", "1:2"] {
        let target = format!("/hc/coap://h:{port}/");
        assert_eq!(proxy_uri(&target), Err(UriError::BadPort), "{target}");
    }
}

#[test]
fn an_empty_host_is_refused() {
    for target in ["/hc/coap:///x", "/hc/coap://:5683/x", "/hc/coap://?x"] {
        assert_eq!(proxy_uri(target), Err(UriError::EmptyHost), "{target}");
    }
}

#[test]
fn userinfo_is_refused() {
    assert_eq!(proxy_uri("/hc/coap://u@h/"), Err(UriError::UserInfo));
}

#[test]
fn a_host_with_a_character_outside_reg_name_is_refused() {
    assert_eq!(proxy_uri("/hc/coap://h<1>/"), Err(UriError::BadHost));
    // Decodes to bytes that are not UTF-8: the proxy engine could not use it.
    assert_eq!(proxy_uri("/hc/coap://h%FF/"), Err(UriError::BadHost));
}

#[test]
fn a_proxy_uri_over_1034_bytes_is_414() {
    let fits = format!("/hc/coap://h/{}bcd", "a/".repeat(511));
    assert_eq!(proxy_uri(&fits).unwrap().len(), MAX_PROXY_URI);
    let over = format!("{fits}b");
    assert_eq!(proxy_uri(&over), Err(UriError::ProxyUriTooLong));
    assert_eq!(UriError::ProxyUriTooLong.http_status(), 414);
}

#[test]
fn a_segment_or_host_over_255_bytes_is_refused() {
    let segment = format!("/hc/coap://h/{}", "s".repeat(256));
    assert_eq!(proxy_uri(&segment), Err(UriError::OptionTooLong));
    let host = format!("/hc/coap://{}/", "h".repeat(256));
    assert_eq!(proxy_uri(&host), Err(UriError::OptionTooLong));
    let query = format!("/a?{}", "%41".repeat(256));
    assert_eq!(reverse_options(&query), Err(UriError::OptionTooLong));
    assert!(reverse_options(&format!("/{}", "%41".repeat(255))).is_ok());
}

#[test]
fn a_request_target_over_8_kib_is_refused_before_any_work() {
    let long = format!("/{}", "a".repeat(MAX_REQUEST_TARGET));
    assert_eq!(
        coap_target(&long, &Mapping::Reverse),
        Err(UriError::TooLong)
    );
    assert_eq!(UriError::TooLong.http_status(), 414);
    // Even one that would be malformed otherwise.
    let long = format!("/%{}", "#".repeat(MAX_REQUEST_TARGET));
    assert_eq!(coap_target(&long, &FORWARD), Err(UriError::TooLong));
}

#[test]
fn reverse_mapping_splits_path_and_query_into_decoded_options() {
    let (path, query) = reverse_options("/path/seg?a=1&b").unwrap();
    assert_eq!(path, bytes(&["path", "seg"]));
    assert_eq!(query, bytes(&["a=1", "b"]));
}

#[test]
fn reverse_mapping_decodes_a_slash_only_inside_a_segment() {
    let (path, query) = reverse_options("/a%2Fb/c%20d?x=%26y").unwrap();
    assert_eq!(path, bytes(&["a/b", "c d"]));
    assert_eq!(query, bytes(&["x=&y"]));
}

#[test]
fn reverse_root_and_empty_query_give_no_options() {
    assert_eq!(reverse_options("/").unwrap(), (vec![], vec![]));
    assert_eq!(reverse_options("/?").unwrap(), (vec![], vec![]));
    let (path, query) = reverse_options("/a/??").unwrap();
    assert_eq!((path, query), (bytes(&["a", ""]), bytes(&["?"])));
}

#[test]
fn with_both_mappings_only_targets_under_the_prefix_are_forwarded() {
    let forward = coap_target("/hc/coap://h/x", &BOTH).unwrap();
    assert!(matches!(forward, CoapTarget::Forward { .. }));
    let reverse = coap_target("/hcx/coap://h/x", &BOTH).unwrap();
    assert!(matches!(reverse, CoapTarget::Reverse { .. }));
    assert!(matches!(
        coap_target("/hc", &BOTH),
        Ok(CoapTarget::Reverse { .. })
    ));
}

#[test]
fn a_target_outside_the_prefix_without_reverse_mapping_is_404() {
    assert_eq!(coap_target("/other", &FORWARD), Err(UriError::NotMapped));
    assert_eq!(UriError::NotMapped.http_status(), 404);
}

#[test]
fn the_prefix_is_configurable() {
    let mapping = Mapping::Forward { prefix: "/proxy/" };
    let target = coap_target("/proxy/coap://h/x", &mapping).unwrap();
    assert_eq!(
        target,
        CoapTarget::Forward {
            proxy_uri: "coap://h/x".into()
        }
    );
    assert_eq!(
        coap_target("/hc/coap://h/x", &mapping),
        Err(UriError::NotMapped)
    );
}

#[test]
fn an_absolute_form_target_is_reduced_to_its_path() {
    let uri = coap_target("http://proxy:8080/hc/coap://h/x", &FORWARD).unwrap();
    assert_eq!(
        uri,
        CoapTarget::Forward {
            proxy_uri: "coap://h/x".into()
        }
    );
    let (path, query) = match coap_target("HTTP://proxy?a", &Mapping::Reverse).unwrap() {
        CoapTarget::Reverse { path, query } => (path, query),
        other => panic!("{other:?}"),
    };
    assert_eq!((path, query), (vec![], bytes(&["a"])));
}

#[test]
fn asterisk_and_other_forms_are_refused() {
    for target in ["*", "", "hc/coap://h/", "ftp://h/x"] {
        assert_eq!(
            coap_target(target, &BOTH),
            Err(UriError::NotOriginForm),
            "{target}"
        );
    }
}

#[test]
fn every_error_has_a_client_or_gateway_status_and_a_text() {
    for e in [
        UriError::BadHost,
        UriError::MissingScheme,
        UriError::Fragment,
    ] {
        assert_eq!(e.http_status(), 400);
        assert!(!e.to_string().is_empty());
    }
}
