//! Every answer from the cache was fresh when given: random runs in virtual time.

use std::collections::HashMap;

use proptest::prelude::*;
use rand::SeedableRng;

use super::*;

/// What clients do, and time passing.
#[derive(Clone, Debug)]
enum Op {
    Get { client: u8, resource: u8 },
    Put { client: u8, resource: u8 },
    Wait { ms: u32 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..4u8, 0..3u8).prop_map(|(client, resource)| Op::Get { client, resource }),
        1 => (0..4u8, 0..3u8).prop_map(|(client, resource)| Op::Put { client, resource }),
        3 => (0..25_000u32).prop_map(|ms| Op::Wait { ms }),
    ]
}

/// The origin: per resource, its version, and for each version the latest time it said
/// the version was current and for how long (a 2.05 or a 2.03 with Max-Age).
#[derive(Default)]
struct Origin {
    version: HashMap<u8, u32>,
    vouched: HashMap<(u8, u32), (Timestamp, u32)>,
    next_max_age: u32,
}

impl Origin {
    /// Answers one request the proxy sent upstream, piggybacked.
    fn answer(&mut self, now: Timestamp, req: &Message) -> Vec<u8> {
        let path = req
            .options()
            .filter(|o| o.0 == URI_PATH)
            .map(|o| o.1)
            .last()
            .unwrap();
        let r = path[1] - b'0';
        let version = *self.version.entry(r).or_insert(1);
        let (mid, token) = (req.message_id(), req.token());
        if req.code() == Code::PUT {
            self.version.insert(r, version + 1);
            return message(MessageType::Ack, Code::CHANGED, mid, token, &[], b"");
        }
        // Max-Age cycles through 0..=19 s, 0 meaning "do not cache".
        self.next_max_age = (self.next_max_age + 7) % 20;
        let max_age = self.next_max_age;
        self.vouched.insert((r, version), (now, max_age));
        let etag = format!("v{version}");
        let age = [max_age as u8];
        let opts: [Opt; 2] = [(ETAG, etag.as_bytes()), (MAX_AGE, &age)];
        let current = req.options().any(|o| o.0 == ETAG && o.1 == etag.as_bytes());
        match current {
            true => message(MessageType::Ack, Code::VALID, mid, token, &opts, b""),
            false => {
                let body = format!("r{r}v{version}");
                message(
                    MessageType::Ack,
                    Code::CONTENT,
                    mid,
                    token,
                    &opts,
                    body.as_bytes(),
                )
            }
        }
    }

    /// A 2.05 a client got at `now`: its version was vouched for until at least now, and
    /// its Max-Age does not reach past that (RFC 7252 §5.6.1, §5.7.1); and it is the
    /// current version, unless the origin still vouches for the older one (a PUT makes
    /// the older stale at once, §5.9.1.4).
    fn check(&self, now: Timestamp, answer: &Message) -> Result<(), String> {
        let body = std::str::from_utf8(answer.payload()).unwrap();
        let (r, version) = body[1..].split_once('v').unwrap();
        let (r, version): (u8, u32) = (r.parse().unwrap(), version.parse().unwrap());
        let (at, max_age) = self.vouched[&(r, version)];
        let until = at + Duration::from_secs(u64::from(max_age));
        let wire = max_age_of(answer);
        let current = self.version[&r];
        if now > until {
            return Err(format!("{body} given at {now:?}, stale since {until:?}"));
        }
        if now + Duration::from_secs(u64::from(wire)) > until + Duration::from_secs(1) {
            return Err(format!("{body} given with Max-Age {wire}, past {until:?}"));
        }
        if version != current {
            return Err(format!("{body} given after a PUT made it v{current}"));
        }
        Ok(())
    }
}

fn max_age_of(m: &Message) -> u32 {
    m.option(MAX_AGE).map_or(60, |v| decode_uint(v).unwrap())
}

fn run(ops: &[Op]) -> Result<(u64, u64), String> {
    let mut p = cached_proxy();
    let mut origin = Origin::default();
    let mut now = at(0.0);
    for (i, op) in ops.iter().enumerate() {
        let mid = i as u16;
        let (client, code, resource) = match *op {
            Op::Wait { ms } => {
                now += Duration::from_millis(u64::from(ms));
                while let Some(t) = p.poll_timeout().filter(|&t| t <= now) {
                    p.handle_timeout(t);
                }
                drain(&mut p);
                continue;
            }
            Op::Get { client, resource } => (client, Code::GET, resource),
            Op::Put { client, resource } => (client, Code::PUT, resource),
        };
        let path = format!("r{resource}");
        let req = message(
            MessageType::Con,
            code,
            mid,
            &mid.to_be_bytes(),
            &[(URI_PATH, path.as_bytes())],
            b"",
        );
        let from = observer(u16::from(client));
        p.handle_client_datagram(now, from, &req);
        let mut out = drain(&mut p);
        while let Some(i) = out.iter().position(|t| t.to == Destination::Upstream(EP0)) {
            let up = out.remove(i);
            let answer = origin.answer(now, &parse(&up.payload));
            p.handle_upstream_datagram(now, EP0, &answer);
            out.extend(drain(&mut p));
        }
        for t in out
            .iter()
            .filter(|t| t.to == Destination::Client(from.into()))
        {
            let answer = parse(&t.payload);
            if answer.code() == Code::CONTENT {
                origin
                    .check(now, &answer)
                    .map_err(|e| format!("op {i} {op:?}: {e}"))?;
            }
        }
    }
    let c = p.cache_stats().0;
    Ok((c.hits, c.revalidated))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn every_answer_from_the_cache_was_fresh_when_given(ops in proptest::collection::vec(op(), 1..300)) {
        prop_assert!(run(&ops).is_ok(), "{:?}", run(&ops));
    }
}

#[test]
fn random_runs_answer_from_the_cache_and_revalidate() {
    // The property above would hold for a cache that never answers: these runs do.
    let mut rng = rand::rngs::SmallRng::seed_from_u64(5);
    let (mut hits, mut revalidated) = (0, 0);
    for _ in 0..20 {
        let ops: Vec<Op> = (0..300)
            .map(|_| match rand::Rng::random_range(&mut rng, 0..10) {
                0 => Op::Put {
                    client: 0,
                    resource: 0,
                },
                1..=3 => Op::Wait {
                    ms: rand::Rng::random_range(&mut rng, 0..25_000),
                },
                _ => Op::Get {
                    client: rand::Rng::random_range(&mut rng, 0..4),
                    resource: rand::Rng::random_range(&mut rng, 0..3),
                },
            })
            .collect();
        let (h, r) = run(&ops).unwrap();
        (hits, revalidated) = (hits + h, revalidated + r);
    }
    assert!(
        hits > 100 && revalidated > 10,
        "hits {hits}, revalidated {revalidated}"
    );
}

#[test]
fn the_check_catches_a_stale_answer() {
    // The checker itself: a version vouched for 5 s from 0 is stale at 6 s.
    let mut origin = Origin::default();
    origin.version.insert(0, 1);
    origin.vouched.insert((0, 1), (at(0.0), 5));
    let stale = message(
        MessageType::Ack,
        Code::CONTENT,
        1,
        b"t",
        &[(MAX_AGE, &[1])],
        b"r0v1",
    );
    assert!(origin.check(at(6.0), &parse(&stale)).is_err());
    assert!(origin.check(at(4.0), &parse(&stale)).is_ok());
}
