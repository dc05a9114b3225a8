//! Invalidation, block-wise transfers and the memory budget.

use super::*;

// --- Invalidation (RFC 7252 §5.9.1, §5.10.7; RFC 8132 §3) ---

#[test]
fn invalidation_makes_every_entry_of_the_resource_stale() {
    let mut cache = cache();
    let requests = [
        get(&[]),
        get(&[(option::ACCEPT, &[50])]),
        get(&[(option::BLOCK2, &[0x06])]),
        message(
            Code::FETCH,
            &[(option::URI_PATH, b"a"), (option::URI_PATH, b"b")],
            b"q",
        ),
    ];
    let other = message(Code::GET, &[(option::URI_PATH, b"c")], &[]);
    let keys: Vec<_> = requests.iter().chain([&other]).map(|r| key_of(r)).collect();
    for (key, block) in &keys {
        cache
            .store(at(0.0), key, *block, &parse(&content(None, None, b"x")))
            .unwrap();
    }
    let put = message(
        Code::PUT,
        &[(option::URI_PATH, b"a"), (option::URI_PATH, b"b")],
        b"",
    );
    assert!(cache.invalidate_resource(&Resource::of_request(TARGET, &parse(&put))));
    for (key, block) in &keys[..4] {
        assert_eq!(found(cache.lookup(at(0.0), key, *block)), Found::Miss);
    }
    let (key, block) = &keys[4];
    assert_eq!(found(cache.lookup(at(0.0), key, *block)), fresh(60, b"x"));
    assert_eq!((cache.entries(), cache.counters().invalidations), (1, 1));
    assert!(!cache.invalidate_resource(&Resource::of_request(TARGET, &parse(&put))));
}

#[test]
fn invalidated_entry_with_an_etag_can_be_revalidated() {
    let (mut cache, key) = cache_with(&content(Some(60), Some(b"v1"), b"x"));
    cache.invalidate_resource(&Resource::of_request(TARGET, &parse(&get(&[]))));
    assert_eq!(
        lookup(&mut cache, at(1.0), &key),
        Found::Stale(b"v1".to_vec())
    );
    assert!(cache
        .revalidated(at(2.0), &key, None, &parse(&valid(b"v1", &[])))
        .is_some());
    assert_eq!(lookup(&mut cache, at(2.0), &key), fresh(60, b"x"));
}

#[test]
fn a_response_stored_after_an_invalidation_at_the_same_instant_is_fresh() {
    let (mut cache, (key, _)) = (cache(), key_of(&get(&[])));
    cache
        .store(at(0.0), &key, None, &parse(&content(None, None, b"a")))
        .unwrap();
    cache.invalidate_resource(&Resource::of_request(TARGET, &parse(&get(&[]))));
    cache
        .store(at(0.0), &key, None, &parse(&content(None, None, b"b")))
        .unwrap();
    assert_eq!(lookup(&mut cache, at(0.0), &key), fresh(60, b"b"));
}

// --- Block-wise (RFC 7959 §2.4, §2.10) ---

/// A 2.05 carrying block `num` of size 16 (more follow) with `etag`.
fn block(num: u32, etag: &[u8]) -> Vec<u8> {
    let b2 = BlockValue::new(num, true, 0).encode().unwrap();
    message(
        Code::CONTENT,
        &[(option::ETAG, etag), (option::BLOCK2, &b2)],
        &[num as u8; 16],
    )
}

fn block_ref(num: u32) -> Option<BlockRef> {
    Some(BlockRef { num, szx: 0 })
}

#[test]
fn each_block_is_cached_under_its_number_and_size() {
    let (mut cache, (key, _)) = (cache(), key_of(&get(&[])));
    for num in 0..3 {
        cache
            .store(at(0.0), &key, block_ref(num), &parse(&block(num, b"e")))
            .unwrap();
    }
    for num in 0..3 {
        let got = found(cache.lookup(at(1.0), &key, block_ref(num)));
        assert_eq!(got, fresh(59, &[num as u8; 16]));
    }
    let other_size = Some(BlockRef { num: 0, szx: 1 });
    assert_eq!(found(cache.lookup(at(1.0), &key, other_size)), Found::Miss);
    assert_eq!(lookup(&mut cache, at(1.0), &key), Found::Miss);
    let req = get(&[(option::BLOCK2, &[0x10])]);
    assert_eq!(key_of(&req), (key, block_ref(1)));
}

#[test]
fn untagged_blocks_are_kept_as_one_representation_and_a_tagged_one_replaces_them() {
    let (mut cache, (key, _)) = (cache(), key_of(&get(&[])));
    for num in 0..3 {
        let b2 = BlockValue::new(num, true, 0).encode().unwrap();
        let untagged = message(Code::CONTENT, &[(option::BLOCK2, &b2)], &[num as u8; 16]);
        cache
            .store(at(0.0), &key, block_ref(num), &parse(&untagged))
            .unwrap();
    }
    assert_eq!(cache.entries(), 3);
    cache
        .store(at(1.0), &key, block_ref(1), &parse(&block(1, b"e")))
        .unwrap();
    assert_eq!(
        cache.entries(),
        1,
        "a tagged block is another representation"
    );
}

#[test]
fn a_block_with_a_new_etag_drops_the_blocks_of_other_representations() {
    let (mut cache, (key, _)) = (cache(), key_of(&get(&[])));
    for num in 0..3 {
        cache
            .store(at(0.0), &key, block_ref(num), &parse(&block(num, b"old")))
            .unwrap();
    }
    cache
        .store(at(1.0), &key, block_ref(1), &parse(&block(1, b"new")))
        .unwrap();
    assert_eq!(cache.entries(), 1);
    assert_eq!(
        found(cache.lookup(at(1.0), &key, block_ref(0))),
        Found::Miss
    );
    let got = found(cache.lookup(at(1.0), &key, block_ref(1)));
    assert_eq!(got, fresh(60, &[1; 16]));
}

#[test]
fn validating_one_block_validates_the_blocks_with_its_etag() {
    let (mut cache, (key, _)) = (cache(), key_of(&get(&[])));
    for num in 0..3 {
        cache
            .store(at(0.0), &key, block_ref(num), &parse(&block(num, b"e")))
            .unwrap();
    }
    assert!(cache
        .revalidated(at(70.0), &key, block_ref(0), &parse(&valid(b"e", &[])))
        .is_some());
    for num in 0..3 {
        let got = found(cache.lookup(at(70.0), &key, block_ref(num)));
        assert_eq!(got, fresh(60, &[num as u8; 16]));
    }
}

// --- Memory (budget, LRU) ---

#[test]
fn the_least_recently_used_entry_is_evicted_first() {
    let paths: Vec<Vec<u8>> = (0..3u8)
        .map(|i| message(Code::GET, &[(option::URI_PATH, &[b'a' + i])], &[]))
        .collect();
    let keys: Vec<CacheKey> = paths.iter().map(|p| key_of(p).0).collect();
    let response = content(None, None, &[0; 100]);
    let mut probe = cache();
    probe
        .store(at(0.0), &keys[0], None, &parse(&response))
        .unwrap();
    // Room for two entries, not three.
    let mut cache = ResponseCache::new(probe.bytes() * 5 / 2, [1, 2]);
    cache
        .store(at(0.0), &keys[0], None, &parse(&response))
        .unwrap();
    cache
        .store(at(0.0), &keys[1], None, &parse(&response))
        .unwrap();
    assert!(matches!(
        cache.lookup(at(1.0), &keys[0], None),
        Lookup::Fresh(_)
    ));
    cache
        .store(at(2.0), &keys[2], None, &parse(&response))
        .unwrap();
    let fresh = |c: &mut ResponseCache, k| matches!(c.lookup(at(2.0), k, None), Lookup::Fresh(_));
    assert!(fresh(&mut cache, &keys[0]) && fresh(&mut cache, &keys[2]));
    assert!(!fresh(&mut cache, &keys[1]));
    assert_eq!((cache.entries(), cache.counters().evictions), (2, 1));
    assert!(cache.bytes() <= probe.bytes() * 5 / 2);
}

#[test]
fn an_entry_larger_than_the_whole_budget_is_not_stored() {
    let (key, _) = key_of(&get(&[]));
    let mut cache = ResponseCache::new(1000, [1, 2]);
    let small = content(None, None, b"x");
    cache.store(at(0.0), &key, None, &parse(&small)).unwrap();
    let big = content(None, None, &[0; 1000]);
    let got = cache.store(at(0.0), &key, None, &parse(&big));
    assert_eq!(
        (got, cache.entries(), cache.bytes()),
        (Err(NotStored::TooLarge), 0, 0)
    );
}

#[test]
fn budget_0_turns_the_cache_off() {
    let (key, _) = key_of(&get(&[]));
    let mut cache = ResponseCache::new(0, [1, 2]);
    let response = parse(&content(None, Some(b"e"), b"x")).as_bytes().to_vec();
    assert_eq!(
        cache.store(at(0.0), &key, None, &parse(&response)),
        Err(NotStored::Off)
    );
    assert_eq!(lookup(&mut cache, at(0.0), &key), Found::Miss);
    assert!(cache
        .revalidated(at(0.0), &key, None, &parse(&valid(b"e", &[])))
        .is_none());
    assert_eq!(
        (cache.counters(), cache.entries(), cache.bytes()),
        (CacheCounters::default(), 0, 0)
    );
}

#[test]
fn bytes_count_key_resource_response_and_fixed_overhead_and_return_to_0() {
    let (key, _) = key_of(&get(&[]));
    let (mut cache, response) = (cache(), content(Some(60), None, b"payload"));
    cache.store(at(0.0), &key, None, &parse(&response)).unwrap();
    // Kept without the token and Max-Age (3 bytes: delta 14 takes an extension byte).
    let stored_len = response.len() - b"tok".len() - 3;
    let want = ResponseCache::fixed_bytes_per_entry()
        + key.as_bytes().len()
        + key.resource_bytes().len()
        + stored_len;
    assert_eq!(cache.bytes(), want);
    assert!(
        ResponseCache::fixed_bytes_per_entry() >= 150,
        "honest: slab, links, two maps"
    );
    cache.invalidate_resource(&Resource::of_request(TARGET, &parse(&get(&[]))));
    assert_eq!(lookup(&mut cache, at(0.0), &key), Found::Miss);
    assert_eq!((cache.entries(), cache.bytes()), (0, 0));
}
