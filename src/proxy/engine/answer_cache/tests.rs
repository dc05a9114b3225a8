use super::*;
use crate::proxy::engine::clients;

fn key(n: u16) -> ClientKey {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 40_000 + n));
    (Peer::Udp(addr), CoapToken::new(b"t").unwrap(), n)
}

fn at(s: u64) -> Timestamp {
    Timestamp::from_nanos(s * 1_000_000_000)
}

/// A bound in answers only.
fn answers(count: usize) -> Bound {
    Bound {
        count,
        bytes: usize::MAX,
    }
}

/// A bound in bytes only.
fn bytes(bytes: usize) -> Bound {
    Bound {
        count: usize::MAX,
        bytes,
    }
}

#[test]
fn answers_replay_until_they_expire_oldest_first() {
    let mut ring = AnswerRing::new(Duration::from_secs(10), answers(100));
    let slot = Some(crate::proxy::engine::clients::tests::some_slot());
    let a = ring.push(at(1), key(1), Replay::Answer(b"first"), None);
    let b = ring.push(at(2), key(2), Replay::EmptyAck, slot);
    let c = ring.push(at(3), key(3), Replay::Answer(b"third"), None);
    assert!(ring.holds(a) && ring.holds(c) && !ring.holds(c + 1));
    assert_eq!(ring.replay(a), Some(Replay::Answer(b"first".to_vec())));
    assert_eq!(ring.replay(b), Some(Replay::EmptyAck));
    assert_eq!(ring.next_expiry(), Some(at(11)));
    assert_eq!(ring.pop_expired(at(10)), None);
    let gone = ring.pop_expired(at(11)).unwrap();
    assert_eq!((gone.key, gone.seq, gone.early), (key(1), a, false));
    assert_eq!(ring.replay(a), None);
    assert!(!ring.holds(a));
    assert_eq!(ring.replay(c), Some(Replay::Answer(b"third".to_vec())));
    assert_eq!(ring.pop_expired(at(12)).map(|g| g.client), Some(slot));
    assert_eq!(ring.len(), 1);
}

#[test]
fn an_entry_is_small() {
    assert!(std::mem::size_of::<Entry<ClientKey>>() <= 80);
}

#[test]
fn the_bound_evicts_the_oldest_and_says_if_a_client_could_still_ask() {
    let mut ring = AnswerRing::new(Duration::from_secs(247), answers(2));
    for n in 0..3 {
        ring.push(at(u64::from(n)), key(n), Replay::Nothing, None);
    }
    let gone = ring.pop_over_bound(at(3)).unwrap();
    assert_eq!((gone.key, gone.early), (key(0), true));
    assert_eq!(ring.pop_over_bound(at(3)), None);
    ring.push(at(200), key(9), Replay::Nothing, None);
    assert!(!ring.pop_over_bound(at(200)).unwrap().early, "93 s passed");
}

#[test]
fn a_client_over_its_share_loses_its_own_oldest_answer_not_the_others() {
    let (flooder, other) = (clients::tests::slot(1), clients::tests::slot(2));
    let mut ring = AnswerRing::with_shares(Duration::from_secs(247), answers(100), answers(3));
    let legit = ring.push(at(0), key(0), Replay::Answer(b"legit"), Some(other));
    let (mut seqs, mut gone) = (Vec::new(), Vec::new());
    for n in 1..=6 {
        seqs.push(ring.push(at(1), key(n), Replay::Answer(b"flood"), Some(flooder)));
        assert_eq!(ring.pop_over_share(at(1), other), None);
        gone.extend(
            ring.pop_over_share(at(1), flooder)
                .map(|g| (g.key, g.client)),
        );
    }
    // Each push past the share took the flooder's own oldest.
    let want: Vec<_> = (1..=3).map(|n| (key(n), Some(flooder))).collect();
    assert_eq!((gone, ring.len()), (want, 4));
    assert_eq!(ring.replay(legit), Some(Replay::Answer(b"legit".to_vec())));
    assert!(seqs[..3]
        .iter()
        .all(|&s| !ring.holds(s) && ring.replay(s).is_none()));
    assert!(seqs[3..].iter().all(|&s| ring.holds(s)));
}

#[test]
fn the_oldest_of_a_client_at_the_front_leaves_from_the_front() {
    let c = clients::tests::slot(0);
    let mut ring = AnswerRing::with_shares(Duration::from_secs(247), answers(100), answers(2));
    for n in 0..1000 {
        ring.push(at(1), key(n), Replay::Answer(b"x"), Some(c));
        if n >= 2 {
            let gone = ring.pop_over_share(at(1), c).unwrap();
            assert_eq!(gone.seq, u64::from(n) - 2);
        }
        assert_eq!(ring.dead, 0, "no entry left dead behind the front");
    }
    assert_eq!((ring.len(), ring.bytes.len()), (2, 2));
}

/// A model of the ring: every entry pushed with its client, its bytes (`None`: kept
/// without them, being too long) and whether it is kept. Small answers first, where the
/// bounds in answers bind; then longer ones, where the bounds in bytes do; now and then
/// one longer than a share.
#[test]
fn shares_bounds_and_expiry_agree_with_a_model_through_compactions() {
    let mut rng = crate::test_support::Rng::new(0x5eed_cafe);
    let share = Bound {
        count: 40,
        bytes: 900,
    };
    let max = Bound {
        count: 150,
        bytes: 3_000,
    };
    let mut ring = AnswerRing::with_shares(Duration::from_secs(30), max, share);
    let mut model: Vec<(u64, u32, Option<Vec<u8>>, bool)> = Vec::new();
    let (mut compactions, mut too_large) = (0, 0);
    for step in 0..40_000u32 {
        let now = at(u64::from(step / 100));
        // Client 0 floods; 1..=8 trickle.
        let client = [0, 1 + rng.below(8) as u32][usize::from(rng.below(3) == 0)];
        let longest = if step < 20_000 { 8 } else { 90 };
        let pad = match rng.below(400) {
            0 => share.bytes,
            _ => rng.below(longest),
        };
        let body = format!("{step}:{}", "b".repeat(pad)).into_bytes();
        let seq = ring.push(
            now,
            key((step % 20_000) as u16),
            Replay::Answer(&body),
            Some(clients::tests::slot(client)),
        );
        let fits = body.len() <= share.bytes;
        too_large += usize::from(!fits);
        model.push((seq, client, fits.then_some(body), true));
        let dead_before = ring.dead;
        while let Some(g) = ring.pop_over_share(now, clients::tests::slot(client)) {
            let oldest = model.iter_mut().find(|m| m.1 == client && m.3).unwrap();
            assert_eq!(g.seq, oldest.0, "step {step}: the client's own oldest");
            oldest.3 = false;
        }
        compactions += usize::from(ring.dead < dead_before);
        while let Some(g) = ring.pop_over_bound(now).or_else(|| ring.pop_expired(now)) {
            let oldest = model.iter_mut().find(|m| m.3).unwrap();
            assert_eq!(g.seq, oldest.0, "step {step}: the oldest of all");
            oldest.3 = false;
        }
        // What the ring holds, dead bytes included, is within its bound; so is what
        // its byte queue may grow to.
        assert!(ring.bytes() <= max.bytes, "step {step}");
        assert!(
            ring.bytes.capacity() <= max.bytes + share.bytes,
            "step {step}"
        );
        if step % 97 == 0 {
            for (seq, c, body, kept) in &model {
                let want = kept.then(|| match body {
                    Some(body) => Replay::Answer(body.clone()),
                    None => Replay::Nothing,
                });
                assert_eq!(ring.replay(*seq), want, "step {step}, seq {seq} of {c}");
            }
            let live = model.iter().filter(|m| m.3).count();
            assert_eq!(ring.len(), live);
            assert!(ring.entries.len() <= live + live / 2 + DEAD_SLACK + 1);
            let of = |c: u32| model.iter().filter(move |m| m.1 == c && m.3);
            let bytes_of = |c| {
                of(c)
                    .map(|m| m.2.as_ref().map_or(0, Vec::len))
                    .sum::<usize>()
            };
            assert!((0..9).all(|c| of(c).count() <= share.count), "step {step}");
            assert!((0..9).all(|c| bytes_of(c) <= share.bytes), "step {step}");
            let live_bytes: usize = (0..9).map(bytes_of).sum();
            assert_eq!(ring.bytes(), live_bytes + ring.dead_bytes, "step {step}");
        }
    }
    assert!(compactions > 10, "{compactions} compactions");
    assert!(too_large > 50 && ring.too_large() == too_large as u64);
}

#[test]
fn the_byte_bound_evicts_the_oldest_and_says_if_a_client_could_still_ask() {
    let mut ring = AnswerRing::new(Duration::from_secs(247), bytes(100));
    let seqs: Vec<u64> = (0..10)
        .map(|n| ring.push(at(0), key(n), Replay::Answer(&[n as u8; 10]), None))
        .collect();
    assert_eq!((ring.pop_over_bound(at(0)), ring.bytes()), (None, 100));
    // 25 more bytes: the three oldest go, every one while its client could still ask.
    let last = ring.push(at(1), key(10), Replay::Answer(&[10; 25]), None);
    let gone: Vec<_> = std::iter::from_fn(|| ring.pop_over_bound(at(1))).collect();
    assert_eq!(gone.iter().map(|g| g.seq).collect::<Vec<_>>(), seqs[..3]);
    assert!(gone.iter().all(|g| g.early));
    assert_eq!((ring.bytes(), ring.len()), (95, 8));
    assert_eq!(ring.replay(last), Some(Replay::Answer(vec![10; 25])));
    assert_eq!(ring.replay(seqs[3]), Some(Replay::Answer(vec![3; 10])));
}

#[test]
fn a_client_over_its_byte_share_loses_its_own_oldest_answers_not_the_others() {
    let (flooder, other) = (clients::tests::slot(1), clients::tests::slot(2));
    let mut ring = AnswerRing::with_shares(Duration::from_secs(247), bytes(1000), bytes(30));
    let legit = ring.push(at(0), key(0), Replay::Answer(b"legit"), Some(other));
    let first: Vec<u64> = (1..=3)
        .map(|n| ring.push(at(1), key(n), Replay::Answer(&[1; 10]), Some(flooder)))
        .collect();
    assert_eq!(
        ring.pop_over_share(at(1), flooder),
        None,
        "30 bytes: its share"
    );
    // 20 more bytes: its two oldest make room, one call each.
    let long = ring.push(at(1), key(4), Replay::Answer(&[4; 20]), Some(flooder));
    let gone: Vec<_> = std::iter::from_fn(|| ring.pop_over_share(at(1), flooder))
        .map(|g| g.seq)
        .collect();
    assert_eq!(gone, first[..2]);
    assert_eq!(ring.pop_over_share(at(1), other), None);
    assert_eq!(ring.replay(legit), Some(Replay::Answer(b"legit".to_vec())));
    assert!(ring.holds(first[2]) && ring.holds(long));
    // The dead bytes stay in the queue until they can go: they are counted there.
    assert_eq!(ring.bytes(), 5 + 30 + 20);
}

#[test]
fn an_answer_longer_than_a_share_is_kept_without_its_bytes() {
    let c = clients::tests::slot(1);
    let mut ring = AnswerRing::with_shares(Duration::from_secs(247), bytes(1000), bytes(30));
    let small = ring.push(at(0), key(0), Replay::Answer(b"small"), Some(c));
    let long = ring.push(at(0), key(1), Replay::Answer(&[7; 31]), Some(c));
    assert_eq!(ring.pop_over_share(at(0), c), None, "nothing of it counted");
    assert_eq!(ring.replay(long), Some(Replay::Nothing));
    assert_eq!(ring.replay(small), Some(Replay::Answer(b"small".to_vec())));
    assert_eq!((ring.bytes(), ring.len(), ring.too_large()), (5, 2, 1));
    // Without shares, the bound is the limit.
    let mut ring = AnswerRing::new(Duration::from_secs(247), bytes(10));
    let long = ring.push(at(0), key(1), Replay::Answer(&[7; 11]), None);
    assert_eq!(
        (ring.replay(long), ring.bytes()),
        (Some(Replay::Nothing), 0)
    );
}

#[test]
fn at_the_byte_bound_a_flooders_dead_bytes_go_before_the_others_answers() {
    let flooder = clients::tests::slot(0);
    let mut ring = AnswerRing::with_shares(Duration::from_secs(247), bytes(1000), bytes(200));
    let legit: Vec<u64> = (1..=3)
        .flat_map(|c| [c, c + 10])
        .map(|n| {
            let c = clients::tests::slot(u32::from(n % 10));
            ring.push(at(0), key(n), Replay::Answer(&[n as u8; 100]), Some(c))
        })
        .collect();
    let mut compacted = false;
    for n in 100..400 {
        ring.push(at(1), key(n), Replay::Answer(&[0; 100]), Some(flooder));
        while ring.pop_over_share(at(1), flooder).is_some() {}
        let dead = ring.dead_bytes;
        assert_eq!(
            ring.pop_over_bound(at(1)),
            None,
            "no answer of the others goes"
        );
        compacted |= ring.dead_bytes < dead;
        assert!(ring.bytes() <= 1000);
    }
    assert!(compacted);
    assert!(legit.iter().all(|&s| ring.holds(s)));
}

#[test]
fn answers_survive_the_byte_queue_wrapping_around() {
    let mut ring = AnswerRing::new(Duration::from_secs(20), answers(1000));
    let mut live = VecDeque::new();
    for n in 0..5000u32 {
        let body = format!("answer {n} {}", "x".repeat((n % 37) as usize));
        let seq = ring.push(
            at(u64::from(n)),
            key(n as u16),
            Replay::Answer(body.as_bytes()),
            None,
        );
        live.push_back((seq, body));
        while ring.pop_expired(at(u64::from(n))).is_some() {
            live.pop_front();
        }
        for (seq, body) in &live {
            assert_eq!(
                ring.replay(*seq),
                Some(Replay::Answer(body.clone().into_bytes()))
            );
        }
    }
}
