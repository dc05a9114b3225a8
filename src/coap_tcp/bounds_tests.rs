//! The connection's bounds in virtual time (issue 40): answers a read's requests may queue,
//! a CSM no answer fits in, and part of a message left hanging.

use super::*;

/// One read of the driver: 16 KiB of 17-byte GETs (the last one cut short).
fn a_read_of_gets() -> Vec<u8> {
    let one = get(b"12345678", "cached");
    assert_eq!(one.len(), 17);
    one.repeat(1 + 16 * 1024 / 17)[..16 * 1024].to_vec()
}

/// Takes requests as the engine would, each answered at once with a 1,000-byte answer that
/// the engine queues; the answers, in order.
fn take_requests(conn: &mut StreamConn) -> Vec<Vec<u8>> {
    let mut answers = Vec::new();
    while let Some(request) = conn.poll_to_engine() {
        let m = Message::parse(&request).unwrap();
        answers.push(answer(
            MessageType::Ack,
            m.message_id(),
            m.token(),
            &[7; 990],
        ));
        conn.queued_by_engine(answers.last().unwrap().len());
    }
    answers
}

#[test]
fn a_reads_requests_cannot_queue_more_answers_than_the_output_bound() {
    let limits = ConnLimits::default();
    let mut conn = open_conn();
    let read = a_read_of_gets();
    // The driver reads while the connection wants input: one read, then its requests wait.
    let mut reads = 0;
    while conn.wants_input() && reads < 16 {
        conn.handle_input(T0, &read);
        reads += 1;
    }
    assert_eq!(reads, 1);
    let answers = take_requests(&mut conn);
    let queued: usize = answers.iter().map(Vec::len).sum();
    // 963 requests came in the read; only those whose answers reach 64 KiB were taken.
    assert!(
        queued >= limits.max_output && queued < limits.max_output + 1000,
        "{} answers, {queued} bytes",
        answers.len()
    );
    assert_eq!(conn.counters().pauses, 1);
    assert!(!conn.wants_input(), "no more is read while they wait");

    // The engine's queue goes out: the answers are written, none is cut off.
    for a in &answers {
        conn.deliver(a);
    }
    conn.engine_queue_emptied();
    assert_eq!(conn.ended(), None);
    assert_eq!(conn.counters().answers, answers.len() as u64);
    assert_eq!(
        conn.poll_to_engine(),
        None,
        "paused while they wait for the socket"
    );
    assert!(conn.buffered() < limits.max_output + 2 * 1024 + read.len());

    // The peer reads them: requests are taken again, as many as fit.
    conn.consume_output(conn.pending_output().len());
    assert_eq!(take_requests(&mut conn).len(), answers.len());
    assert_eq!(conn.counters().pauses, 2);
}

#[test]
fn every_request_of_a_read_is_taken_as_the_peer_reads_the_answers() {
    let mut conn = open_conn();
    let read = a_read_of_gets();
    conn.handle_input(T0, &read);
    let mut taken = 0;
    loop {
        let answers = take_requests(&mut conn);
        if answers.is_empty() {
            break;
        }
        taken += answers.len();
        for a in &answers {
            conn.deliver(a);
        }
        conn.engine_queue_emptied();
        conn.consume_output(conn.pending_output().len());
    }
    assert_eq!(taken, 16 * 1024 / 17);
    assert!(conn.wants_input(), "only the part of the last one is left");
}

#[test]
fn signals_behind_waiting_requests_wait_their_turn() {
    let mut conn = open_conn();
    let mut bytes = get(b"t1", "a");
    signal::encode_ping(&mut bytes, Framing::Stream, b"p");
    bytes.extend(get(b"t2", "b"));
    conn.handle_input(T0, &bytes);
    assert!(
        conn.pending_output().is_empty(),
        "the Ping waits behind the first request"
    );
    assert!(conn.poll_to_engine().is_some());
    assert_eq!(frames(conn.pending_output())[0].0, signal::PONG);
    assert!(conn.poll_to_engine().is_some());
    assert_eq!(conn.poll_to_engine(), None);
}

#[test]
fn a_csm_no_answer_fits_in_is_aborted_naming_max_message_size() {
    for (max, refused) in [(0, true), (63, true), (64, false), (1152, false)] {
        let mut conn = StreamConn::new(T0, Framing::Stream, ConnLimits::default());
        conn.consume_output(conn.pending_output().len());
        conn.handle_input(T0, &csm(max));
        conn.handle_input(T0, &get(b"t", "a"));
        if !refused {
            assert!(conn.is_open(), "{max}");
            continue;
        }
        assert_eq!(conn.ended(), Some(&Ending::MaxMessageSizeTooSmall(max)));
        assert_eq!(conn.poll_to_engine(), None, "nothing reaches the engine");
        let out = frames(conn.pending_output());
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, signal::ABORT);
        // Bad-CSM-Option (2) = 2, Max-Message-Size; then the diagnostic.
        assert_eq!(&out[0].2[..3], &[0x21, 2, 0xff]);
        let why = String::from_utf8_lossy(&out[0].2[3..]).into_owned();
        assert!(why.contains("Max-Message-Size"), "{why}");
    }
}

#[test]
fn part_of_a_message_is_aborted_at_the_message_deadline() {
    let limits = ConnLimits::default();
    let mut conn = open_conn();
    let ping_at = conn.poll_timeout().unwrap();
    let half = get(b"half", "a-resource-name");
    conn.handle_input(T0, &half[..half.len() / 2]);
    let deadline = T0 + limits.message_timeout;
    assert_eq!(conn.poll_timeout(), Some(deadline));
    // More of it, still short, does not move the deadline.
    let later = T0 + Duration::from_secs(5);
    conn.handle_input(later, &half[half.len() / 2..half.len() - 1]);
    assert_eq!(conn.poll_timeout(), Some(deadline));
    conn.handle_timeout(T0 + (limits.message_timeout - Duration::from_millis(1)));
    assert_eq!(conn.ended(), None);
    conn.handle_timeout(deadline);
    assert_eq!(conn.ended(), Some(&Ending::MessageTimeout));
    assert_eq!(
        frames(conn.pending_output()).last().unwrap().0,
        signal::ABORT
    );
    assert!(deadline < ping_at, "long before the keepalive");
}

#[test]
fn a_whole_message_ends_the_deadline_and_our_own_pause_extends_it() {
    let limits = ConnLimits::default();
    let mut conn = open_conn();
    let half = get(b"half", "a-resource-name");
    conn.handle_input(T0, &half[..4]);
    conn.handle_input(T0, &half[4..]);
    assert!(conn.poll_to_engine().is_some());
    assert_eq!(conn.poll_timeout(), Some(T0 + limits.idle_timeout));

    // Our output at its bound: we stopped reading, so the peer is given the time again.
    conn.queued_by_engine(limits.max_output);
    conn.handle_input(T0, &half[..4]);
    let deadline = T0 + limits.message_timeout;
    conn.handle_timeout(deadline);
    assert_eq!(conn.ended(), None);
    assert_eq!(conn.poll_timeout(), Some(deadline + limits.message_timeout));
    conn.engine_queue_emptied();
    conn.handle_timeout(deadline + limits.message_timeout);
    assert_eq!(conn.ended(), Some(&Ending::MessageTimeout));
}

#[test]
fn part_of_a_message_held_by_the_carrier_has_the_same_deadline() {
    let limits = ConnLimits::default();
    let mut conn = StreamConn::new(T0, Framing::WebSocket, limits);
    let mut csm = Vec::new();
    signal::encode_csm(&mut csm, Framing::WebSocket, Settings::default());
    conn.handle_ws_message(T0, &csm);
    conn.carrier_holds_part(true);
    assert_eq!(conn.poll_timeout(), Some(T0 + limits.message_timeout));
    conn.carrier_holds_part(false);
    assert_eq!(conn.poll_timeout(), Some(T0 + limits.idle_timeout));
    conn.carrier_holds_part(true);
    conn.handle_timeout(T0 + limits.message_timeout);
    assert_eq!(conn.ended(), Some(&Ending::MessageTimeout));
}
