use super::*;
use crate::coap::Code;

// --- Content-Format registry ---

#[test]
fn every_registered_format_maps_to_its_media_type_and_back() {
    for &(id, mt) in FORMATS {
        assert_eq!(media_type(id), Some(mt));
        assert_eq!(content_format(mt.as_bytes()), Some(id), "{mt}");
        assert_eq!(content_encoding(id), None);
    }
    for &(id, mt, coding) in ENCODED_FORMATS {
        assert_eq!(
            (media_type(id), content_encoding(id)),
            (Some(mt), Some(coding))
        );
        let back = content_format_with_encoding(mt.as_bytes(), Some(coding.as_bytes()));
        assert_eq!(back, Some(id));
    }
}

#[test]
fn the_issue_table_of_formats_is_all_there() {
    let ids = [
        0, 16, 17, 18, 40, 41, 42, 47, 50, 51, 52, 60, 61, 62, 63, 96, 97, 98, 101, 102, 110, 111,
        112, 113, 114, 115, 256, 310, 311,
    ];
    for id in ids {
        assert!(media_type(id).is_some(), "{id}");
    }
    assert_eq!(media_type(0), Some("text/plain; charset=utf-8"));
    assert_eq!(
        media_type(18),
        Some("application/cose; cose-type=\"cose-sign1\"")
    );
    assert_eq!(media_type(61), Some("application/cwt"));
    assert_eq!(media_type(62), Some("application/multipart-core"));
}

#[test]
fn ids_are_unique_and_entries_with_more_parameters_come_first() {
    let ids = FORMATS
        .iter()
        .map(|f| f.0)
        .chain(ENCODED_FORMATS.iter().map(|f| f.0));
    let mut ids: Vec<u16> = ids.collect();
    let count = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), count);
    let essence = |mt: &str| mt.split(';').next().unwrap_or(mt).to_owned();
    let params = |mt: &str| mt.matches(';').count();
    for (i, (_, earlier)) in FORMATS.iter().enumerate() {
        for (_, later) in &FORMATS[i + 1..] {
            let same_type = essence(earlier) == essence(later);
            assert!(
                !same_type || params(earlier) >= params(later),
                "{later} after {earlier}"
            );
        }
    }
}

#[test]
fn unregistered_formats_have_no_media_type() {
    for id in [1, 15, 43, 255, 1542, 64999, 65000, 65535] {
        assert_eq!(media_type(id), None, "{id}");
    }
}

#[test]
fn content_type_matching_ignores_case_and_whitespace() {
    assert_eq!(content_format(b"Application/JSON"), Some(50));
    assert_eq!(content_format(b"text/plain;CHARSET=UTF-8"), Some(0));
    assert_eq!(
        content_format(b"text/plain ; charset = \"utf-8\" "),
        Some(0)
    );
    let cose = b"application/cose;cose-type=\"cose-sign1\"";
    assert_eq!(content_format(cose), Some(18));
    assert_eq!(
        content_format(b"application/cose; cose-type=cose-mac0"),
        Some(17)
    );
}

#[test]
fn text_plain_without_charset_or_in_us_ascii_is_utf8_text() {
    assert_eq!(content_format(b"text/plain"), Some(0));
    assert_eq!(content_format(b"text/plain; charset=us-ascii"), Some(0));
    assert_eq!(content_format(b"text/plain; charset=iso-8859-1"), None);
}

#[test]
fn a_parameter_the_entry_has_must_be_present() {
    assert_eq!(content_format(b"application/cose"), None);
    assert_eq!(
        content_format(b"application/cose; cose-type=\"cose-other\""),
        None
    );
    assert_eq!(content_format(b"application/pkcs7-mime"), None);
    assert_eq!(
        content_format(b"application/yang-data+cbor; id=sid"),
        Some(140)
    );
    assert_eq!(content_format(b"application/yang-data+cbor"), Some(340));
    let aif = b"application/aif+cbor; toid=oscore-gname; tperm=oscore-gperm";
    assert_eq!(content_format(aif), Some(297));
    assert_eq!(
        content_format(b"application/aif+cbor; toid=CRI-local-part"),
        Some(292)
    );
    let psa = b"application/eat+cwt; eat_profile=\"tag:psacertified.org,2019:psa#legacy\"";
    assert_eq!(content_format(psa), Some(10004));
}

#[test]
fn parameters_the_entry_does_not_name_are_ignored() {
    assert_eq!(content_format(b"application/json; charset=utf-8"), Some(50));
    assert_eq!(content_format(b"application/cbor; foo=\"a;b\""), Some(60));
}

#[test]
fn unknown_or_malformed_content_types_have_no_format() {
    for ct in [
        &b"text/html"[..],
        b"application/coap-payload; cf=60",
        b"json",
        b"/json",
        b"application/",
        b"application/json; charset",
        b"application/json; =x",
        b"application/json; a=\"unterminated",
        b"application/json; a=b c",
        b"appli cation/json",
        b"",
        b"\xff/\xfe",
    ] {
        assert_eq!(
            content_format(ct),
            None,
            "{:?}",
            String::from_utf8_lossy(ct)
        );
    }
}

#[test]
fn too_many_parameters_make_a_content_type_unusable() {
    let many = format!("application/json{}", ";a=b".repeat(MAX_LIST_ELEMENTS + 1));
    assert_eq!(content_format(many.as_bytes()), None);
    let enough = format!("application/json{}", ";a=b".repeat(MAX_LIST_ELEMENTS));
    assert_eq!(content_format(enough.as_bytes()), Some(50));
}

#[test]
fn a_content_encoding_selects_the_encoded_format() {
    let json = b"application/json";
    assert_eq!(
        content_format_with_encoding(json, Some(b"identity")),
        Some(50)
    );
    assert_eq!(
        content_format_with_encoding(json, Some(b"Deflate")),
        Some(11050)
    );
    assert_eq!(content_format_with_encoding(json, Some(b"gzip")), None);
    assert_eq!(
        content_format_with_encoding(b"text/plain", Some(b"deflate")),
        None
    );
}

#[test]
fn an_unknown_response_format_is_octet_stream() {
    assert_eq!(response_content_type(Some(50)), "application/json");
    assert_eq!(response_content_type(Some(65000)), OCTET_STREAM);
    assert_eq!(response_content_type(None), OCTET_STREAM);
}

#[test]
fn text_formats_are_told_from_binary_ones() {
    for cf in [0, 40, 41, 50, 51, 110, 256, 310, 432, 10002, 20000, 30000] {
        assert!(is_text(Some(cf)), "{cf}");
    }
    for cf in [42, 47, 60, 112, 18, 11050, 65000] {
        assert!(!is_text(Some(cf)), "{cf}");
    }
    assert!(!is_text(None));
}

// --- Accept ---

#[test]
fn the_most_preferred_accept_element_wins() {
    assert_eq!(coap_accept(b"application/json"), Some(50));
    assert_eq!(coap_accept(b"text/plain;q=0.5, application/cbor"), Some(60));
    assert_eq!(
        coap_accept(b"application/cbor;q=0.2, application/json;q=0.3"),
        Some(50)
    );
}

#[test]
fn equal_q_values_go_to_the_first_listed() {
    assert_eq!(coap_accept(b"application/cbor, application/json"), Some(60));
    assert_eq!(
        coap_accept(b"application/json;q=0.5,application/cbor;q=0.500"),
        Some(50)
    );
}

#[test]
fn q_zero_is_not_acceptable() {
    assert_eq!(
        coap_accept(b"application/json;q=0, application/cbor;q=0.1"),
        Some(60)
    );
    assert_eq!(coap_accept(b"application/json;q=0.000"), None);
}

#[test]
fn a_range_as_the_most_preferred_sends_no_accept() {
    assert_eq!(coap_accept(b"*/*"), None);
    assert_eq!(coap_accept(b"application/*, application/json;q=0.9"), None);
    assert_eq!(coap_accept(b"application/json, */*;q=0.8"), Some(50));
}

#[test]
fn an_unmappable_most_preferred_type_sends_no_accept() {
    let browser = b"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";
    assert_eq!(coap_accept(browser), None);
    assert_eq!(coap_accept(b"text/event-stream"), None);
}

#[test]
fn malformed_accept_elements_are_skipped() {
    assert_eq!(coap_accept(b"garbage, application/json"), Some(50));
    assert_eq!(
        coap_accept(b"application/cbor;q=2, application/json;q=0.1"),
        Some(50)
    );
    assert_eq!(
        coap_accept(b"application/cbor;q=1.5, application/json;q=0.1"),
        Some(50)
    );
    assert_eq!(coap_accept(b", ,application/json"), Some(50));
    assert_eq!(coap_accept(b"\xff"), None);
}

#[test]
fn a_quoted_comma_does_not_split_the_accept_list() {
    let accept = b"application/cbor;x=\"a,text/plain\";q=0.9, application/json;q=0.1";
    assert_eq!(coap_accept(accept), Some(60));
}

#[test]
fn only_the_first_32_accept_elements_count() {
    let mut accept = "x/y;q=0.1,".repeat(MAX_LIST_ELEMENTS);
    accept.push_str("application/json");
    assert_eq!(coap_accept(accept.as_bytes()), None);
}

#[test]
fn q_values_follow_the_qvalue_grammar() {
    let q = |s: &str| parse_qvalue(s);
    assert_eq!(
        (q("1"), q("1.000"), q("0.5"), q("0.05"), q("0")),
        (Some(1000), Some(1000), Some(500), Some(50), Some(0))
    );
    for bad in ["1.001", "0.1234", "2", ".5", "-0", "0.x", ""] {
        assert_eq!(q(bad), None, "{bad}");
    }
}

#[test]
fn an_event_source_accept_wants_an_event_stream() {
    assert!(wants_event_stream(b"text/event-stream"));
    assert!(wants_event_stream(b"Text/Event-Stream; charset=utf-8"));
    assert!(!wants_event_stream(
        b"application/json, text/event-stream;q=0.5"
    ));
    assert!(!wants_event_stream(b"text/event-stream;q=0"));
    assert!(!wants_event_stream(b"*/*"));
}

// --- Status codes ---

#[test]
fn two_point_oh_one_is_201() {
    assert_eq!(http_status(Code::CREATED, false, false), 201);
    assert_eq!(http_status(Code::CREATED, true, false), 201);
}

#[test]
fn two_point_oh_four_without_payload_is_204() {
    assert_eq!(http_status(Code::CHANGED, false, false), 204);
    assert_eq!(http_status(Code::CHANGED, true, false), 200);
    assert_eq!(http_status(Code::DELETED, false, false), 204);
    assert_eq!(http_status(Code::DELETED, true, false), 200);
}

#[test]
fn two_point_oh_three_is_304_only_for_a_conditional_request() {
    assert_eq!(http_status(Code::VALID, false, true), 304);
    assert_eq!(http_status(Code::VALID, true, false), 200);
}

#[test]
fn every_table_2_code_has_its_status() {
    let table = [
        (Code::CONTENT, 200),
        (Code::BAD_REQUEST, 400),
        (Code::UNAUTHORIZED, 403),
        (Code::BAD_OPTION, 500),
        (Code::FORBIDDEN, 403),
        (Code::NOT_FOUND, 404),
        (Code::METHOD_NOT_ALLOWED, 400),
        (Code::NOT_ACCEPTABLE, 406),
        (Code::PRECONDITION_FAILED, 412),
        (Code::REQUEST_ENTITY_TOO_LARGE, 413),
        (Code::UNSUPPORTED_CONTENT_FORMAT, 415),
        (Code::INTERNAL_SERVER_ERROR, 500),
        (Code::NOT_IMPLEMENTED, 501),
        (Code::BAD_GATEWAY, 502),
        (Code::SERVICE_UNAVAILABLE, 503),
        (Code::GATEWAY_TIMEOUT, 504),
        (Code::PROXYING_NOT_SUPPORTED, 502),
    ];
    for (code, status) in table {
        assert_eq!(http_status(code, true, false), status, "{code}");
    }
}

#[test]
fn later_codes_map_to_the_http_codes_of_the_same_name() {
    assert_eq!(http_status(Code::CONFLICT, false, false), 409);
    assert_eq!(http_status(Code::UNPROCESSABLE_ENTITY, false, false), 422);
    assert_eq!(http_status(Code::TOO_MANY_REQUESTS, false, false), 429);
    assert_eq!(http_status(Code::HOP_LIMIT_REACHED, false, false), 508);
}

#[test]
fn block_wise_internal_codes_are_a_bad_gateway() {
    assert_eq!(http_status(Code::CONTINUE, false, false), 502);
    assert_eq!(
        http_status(Code::REQUEST_ENTITY_INCOMPLETE, false, false),
        502
    );
}

#[test]
fn unknown_codes_go_by_class() {
    assert_eq!(http_status(Code::new(2, 30), true, false), 200);
    assert_eq!(http_status(Code::new(4, 30), true, false), 400);
    assert_eq!(http_status(Code::new(5, 30), true, false), 500);
    assert_eq!(http_status(Code::GET, false, false), 502);
    assert_eq!(http_status(Code::new(3, 1), false, false), 502);
}

#[test]
fn a_four_point_oh_five_says_so_in_the_reason_phrase() {
    assert_eq!(
        reason_hint(Code::METHOD_NOT_ALLOWED),
        Some("CoAP server returned 4.05")
    );
    assert_eq!(reason_hint(Code::NOT_FOUND), None);
}

#[test]
fn retry_after_comes_from_the_max_age_of_a_5_03() {
    assert_eq!(retry_after(Code::SERVICE_UNAVAILABLE, Some(30)), Some(30));
    assert_eq!(retry_after(Code::SERVICE_UNAVAILABLE, None), None);
    assert_eq!(retry_after(Code::GATEWAY_TIMEOUT, Some(30)), None);
}

// --- ETag, If-Match, If-None-Match ---

#[test]
fn a_coap_etag_becomes_a_strong_hex_entity_tag() {
    assert_eq!(http_etag(&[0x0a, 0xff]).as_deref(), Some("\"0aff\""));
    assert_eq!(http_etag(&[0; 8]).as_deref(), Some("\"0000000000000000\""));
    assert_eq!(http_etag(&[]), None);
    assert_eq!(http_etag(&[0; 9]), None);
}

#[test]
fn our_entity_tags_map_back_to_the_coap_etag() {
    for etag in [&[1u8][..], &[0xde, 0xad, 0xbe, 0xef], &[0xff; 8]] {
        let header = http_etag(etag).unwrap();
        let parsed = coap_etags(header.as_bytes()).unwrap();
        assert_eq!(parsed.if_match_etags().collect::<Vec<_>>(), [etag]);
    }
}

#[test]
fn a_star_is_any() {
    assert_eq!(coap_etags(b" * "), Ok(EntityTags::Any));
    assert_eq!(coap_etags(b"*").unwrap().if_match_etags().count(), 0);
}

#[test]
fn weak_tags_match_only_in_if_none_match() {
    let tags = coap_etags(b"W/\"01\", \"02\"").unwrap();
    assert_eq!(tags.if_match_etags().collect::<Vec<_>>(), [&[2u8][..]]);
    assert_eq!(
        tags.if_none_match_etags().collect::<Vec<_>>(),
        [&[1u8][..], &[2]]
    );
}

#[test]
fn tags_that_are_not_ours_are_counted_as_foreign() {
    let tags = coap_etags(b"\"xyzzy\", \"ABCD\", \"\", \"123\", \"001122334455667788\", \"0a\"");
    let expected = EntityTags::Tags {
        etags: vec![CoapEtag {
            value: vec![0x0a],
            weak: false,
        }],
        foreign: 5,
    };
    assert_eq!(tags, Ok(expected));
}

#[test]
fn empty_list_elements_are_allowed() {
    let tags = coap_etags(b" ,\"01\" ,, \"02\",").unwrap();
    assert_eq!(tags.if_match_etags().count(), 2);
}

#[test]
fn malformed_entity_tag_lists_are_refused() {
    for value in [
        &b""[..],
        b" , ",
        b"01",
        b"\"01",
        b"w/\"01\"",
        b"\"01\" \"02\"",
        b"\"01\"x",
        b"*, \"01\"",
        b"\"a b\"",
        b"\"a\x7fb\"",
    ] {
        let shown = String::from_utf8_lossy(value);
        assert_eq!(coap_etags(value), Err(HeaderError::Malformed), "{shown}");
    }
}

#[test]
fn obs_text_is_a_valid_but_foreign_tag() {
    let tags = coap_etags(b"\"\xe9\"");
    assert_eq!(
        tags,
        Ok(EntityTags::Tags {
            etags: vec![],
            foreign: 1
        })
    );
}

#[test]
fn more_than_32_entity_tags_are_refused() {
    let many = vec!["\"01\""; MAX_LIST_ELEMENTS + 1].join(",");
    assert_eq!(coap_etags(many.as_bytes()), Err(HeaderError::TooManyTags));
    let enough = vec!["\"01\""; MAX_LIST_ELEMENTS].join(",");
    assert!(coap_etags(enough.as_bytes()).is_ok());
}

// --- Max-Age, Location ---

#[test]
fn max_age_becomes_cache_control_with_60_by_default() {
    assert_eq!(cache_control(Some(30)), "max-age=30");
    assert_eq!(cache_control(Some(0)), "max-age=0");
    assert_eq!(cache_control(None), "max-age=60");
}

#[test]
fn a_forward_location_points_back_through_the_proxy() {
    let base = LocationBase::Forward {
        prefix: "/hc/",
        authority: "h.example:5683",
    };
    let path: [&[u8]; 2] = [b"new", b"res 1"];
    let query: [&[u8]; 2] = [b"a=1", b"b"];
    let loc = location(&base, path, query);
    assert_eq!(
        loc.as_deref(),
        Some("/hc/coap://h.example:5683/new/res%201?a=1&b")
    );
}

#[test]
fn a_forward_location_escapes_ipv6_brackets() {
    let base = LocationBase::Forward {
        prefix: "/hc/",
        authority: "[::1]:5683",
    };
    let loc = location(&base, [&b"x"[..]], []);
    assert_eq!(loc.as_deref(), Some("/hc/coap://%5B::1%5D:5683/x"));
}

#[test]
fn a_reverse_location_is_a_path_on_the_proxy() {
    assert_eq!(
        location(&LocationBase::Reverse, [&b"a"[..], b"b"], []).as_deref(),
        Some("/a/b")
    );
    assert_eq!(
        location(&LocationBase::Reverse, [], []).as_deref(),
        Some("/")
    );
    assert_eq!(
        location(&LocationBase::Reverse, [], [&b"q"[..]]).as_deref(),
        Some("/?q")
    );
}

#[test]
fn location_values_are_percent_encoded_with_uppercase_hex() {
    let path: [&[u8]; 2] = [b"a/b", b"\xc3\xa9:@!"];
    let query: [&[u8]; 2] = [b"x=a&b", b"p/q?r#"];
    let loc = location(&LocationBase::Reverse, path, query);
    assert_eq!(loc.as_deref(), Some("/a%2Fb/%C3%A9:@!?x=a%26b&p/q?r%23"));
}

#[test]
fn dot_segments_in_location_path_give_no_location() {
    assert_eq!(location(&LocationBase::Reverse, [&b".."[..]], []), None);
    assert_eq!(
        location(&LocationBase::Reverse, [&b"a"[..], b"."], []),
        None
    );
    assert!(location(&LocationBase::Reverse, [&b"..."[..]], []).is_some());
}
