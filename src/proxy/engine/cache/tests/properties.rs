//! Properties over random operations, against a model.

use super::*;

// --- Properties ---

#[derive(Clone, Debug)]
enum Op {
    Store {
        path: u8,
        block: Option<u8>,
        max_age: u8,
        etag: Option<u8>,
        len: u16,
    },
    Lookup {
        path: u8,
        block: Option<u8>,
    },
    Revalidate {
        path: u8,
        block: Option<u8>,
        etag: u8,
        max_age: u8,
    },
    Invalidate {
        path: u8,
    },
    Wait {
        ms: u32,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let (path, block, etag) = (0..4u8, proptest::option::of(0..3u8), 0..2u8);
    prop_oneof![
        2 => (
            path.clone(),
            block.clone(),
            0..90u8,
            proptest::option::of(etag.clone()),
            0..600u16
        )
            .prop_map(|(path, block, max_age, etag, len)| Op::Store {
                path,
                block,
                max_age,
                etag,
                len
            }),
        4 => (path.clone(), block.clone()).prop_map(|(path, block)| Op::Lookup { path, block }),
        1 => (path.clone(), block, etag, 0..90u8).prop_map(|(path, block, etag, max_age)| {
            Op::Revalidate {
                path,
                block,
                etag,
                max_age,
            }
        }),
        1 => path.prop_map(|path| Op::Invalidate { path }),
        2 => (0..12_000u32).prop_map(|ms| Op::Wait { ms }),
    ]
}

/// What the model knows of one entry: `None` if it must not be fresh, else when it was last
/// given its Max-Age (by a store or a 2.03), that Max-Age and its ETag.
type Given = Option<(Timestamp, u32, Option<u8>)>;

/// The model after a store or a 2.03 for (`path`, `block`) at `now`.
fn model_store(model: &mut HashMap<(u8, Option<u8>), Given>, at: (u8, Option<u8>), new: Given) {
    let etag = new.and_then(|(_, _, etag)| etag);
    for (_, given) in model.iter_mut().filter(|(&k, _)| k.0 == at.0 && k != at) {
        // Blocks of another representation are dropped (RFC 7959 §2.4).
        let same = given.is_some_and(|(_, _, e)| e == etag);
        if new.is_some() && !same {
            *given = None;
        }
    }
    model.insert(at, new);
}

/// Runs `ops`, checking after each that the budget holds and that no fresh hit outlived the
/// Max-Age it was last given or survived an invalidation, and that Max-Age left is never more
/// than what is left of it.
/// The block an op names, if any.
fn block_of(b: Option<u8>) -> Option<BlockRef> {
    b.map(|num| BlockRef {
        num: u32::from(num),
        szx: 0,
    })
}

fn run(budget: usize, ops: &[Op]) {
    let mut cache = ResponseCache::new(budget, [3, 4]);
    let mut now = Timestamp::ZERO;
    let mut model: HashMap<(u8, Option<u8>), Given> = HashMap::new();
    let request = |path: u8| message(Code::GET, &[(option::URI_PATH, &[path])], &[]);
    for op in ops {
        match *op {
            Op::Store {
                path,
                block,
                max_age,
                etag,
                len,
            } => {
                let key = key_of(&request(path)).0;
                let tag = etag.map(|e| [e]);
                let payload = vec![1; len.into()];
                let response =
                    content(Some(max_age.into()), tag.as_ref().map(|t| &t[..]), &payload);
                let stored = cache
                    .store(now, &key, block_of(block), &parse(&response))
                    .is_ok();
                let new = stored.then_some((now, u32::from(max_age), etag));
                model_store(&mut model, (path, block), new);
            }
            Op::Revalidate {
                path,
                block,
                etag,
                max_age,
            } => {
                let key = key_of(&request(path)).0;
                let v = valid(&[etag], &[(option::MAX_AGE, &encode_uint(max_age.into()))]);
                if cache
                    .revalidated(now, &key, block_of(block), &parse(&v))
                    .is_some()
                {
                    // Every block of this key with this ETag is refreshed (RFC 7959 §2.10).
                    let mine = |g: &Given| g.is_some_and(|(_, _, e)| e == Some(etag));
                    for ((p, _), given) in model.iter_mut() {
                        if *p == path && mine(given) {
                            *given = Some((now, u32::from(max_age), Some(etag)));
                        }
                    }
                    model.insert((path, block), Some((now, u32::from(max_age), Some(etag))));
                }
            }
            Op::Lookup { path, block } => {
                let key = key_of(&request(path)).0;
                if let Lookup::Fresh(hit) = cache.lookup(now, &key, block_of(block)) {
                    let Some(Some((since, max_age, _))) = model.get(&(path, block)) else {
                        panic!("fresh hit of {path}/{block:?}, never stored or invalidated");
                    };
                    let age = (now - *since).as_secs_f64();
                    assert!(age < f64::from(*max_age), "fresh hit past its Max-Age");
                    assert!(f64::from(hit.max_age_left()) <= f64::from(*max_age) - age);
                }
            }
            Op::Invalidate { path } => {
                let resource = Resource::of_request(TARGET, &parse(&request(path)));
                cache.invalidate_resource(&resource);
                // Stale from now on, but still to be revalidated by its ETag.
                for (_, given) in model.iter_mut().filter(|(k, _)| k.0 == path) {
                    *given = given.map(|(_, _, etag)| (now, 0, etag));
                }
            }
            Op::Wait { ms } => now += Duration::from_millis(ms.into()),
        }
        assert!(
            cache.bytes() <= budget,
            "{} bytes over a budget of {budget}",
            cache.bytes()
        );
    }
}

proptest! {
    #[test]
    fn random_operations_never_exceed_the_budget_nor_give_a_stale_hit(
        budget in 0..6000usize,
        ops in proptest::collection::vec(op(), 1..200),
    ) {
        run(budget, &ops);
    }
}

#[test]
fn decode_uint_reads_the_max_age_written_on_a_hit() {
    // encode_hit writes Max-Age with encode_uint; a client decodes it like any uint.
    let (mut cache, key) = cache_with(&content(Some(70_000), None, b"x"));
    let Lookup::Fresh(hit) = cache.lookup(at(1.5), &key, None) else {
        panic!("not fresh");
    };
    let mut out = Vec::new();
    hit.encode(&mut out, MessageType::Non, 1, b"").unwrap();
    let max_age = parse(&out).option(option::MAX_AGE).map(decode_uint);
    assert_eq!(max_age, Some(Ok(69_998)));
}
