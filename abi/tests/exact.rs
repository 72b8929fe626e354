//! Known answers for the ABI's decoding and layout functions: the kernel, the library OS,
//! the fuzzer and the host tools all depend on these values, so a change must show up here.
//! Each test names the `cargo mutants` survivors it kills (docs/testing.md, "cargo mutants
//! over abi").

use abi::*;

/// Catches: error messages replaced by one constant (cargo mutants: `Error::as_str ->
/// "xyzzy"`): every error has its own, non-empty message.
#[test]
fn every_error_has_its_own_message() {
    let mut seen = std::collections::HashSet::new();
    for e in Error::ALL {
        let m = e.as_str();
        assert!(!m.is_empty(), "{e:?} has an empty message");
        assert!(seen.insert(m), "{e:?} shares its message `{m}`");
    }
    assert_eq!(Error::NoSuchCall.as_str(), "no such system call");
}

/// Catches: `ObjType::from_u32` losing a type (cargo mutants: `-> None`, each match arm
/// deleted).
#[test]
fn object_types_decode_from_their_numbers() {
    let all = [ObjType::Share, ObjType::Segment, ObjType::AddressRange, ObjType::Pcore, ObjType::Device, ObjType::Gate];
    for (i, t) in all.iter().enumerate() {
        assert_eq!(ObjType::from_u32(i as u32 + 1), Some(*t));
    }
    assert_eq!(ObjType::from_u32(0), None);
    assert_eq!(ObjType::from_u32(7), None);
}

/// Catches: `ArKind::span -> 0`: the bytes each kind of address range covers.
#[test]
fn address_range_kinds_span_their_level() {
    assert_eq!(ArKind::Root.span(), USER_END);
    assert_eq!(ArKind::Span512G.span(), 512 << 30);
    assert_eq!(ArKind::Span1G.span(), 1 << 30);
    assert_eq!(ArKind::Span2M.span(), 2 << 20);
}

/// Catches: `role_name` answering a constant or losing a role (cargo mutants: `-> ""`,
/// `-> "xyzzy"`, each arm deleted).
#[test]
fn roles_have_their_names() {
    assert_eq!([role_name(ROLE_XC), role_name(ROLE_AC), role_name(ROLE_KC), role_name(ROLE_TC), role_name(9)], ["XC", "AC", "KC", "TC", "?"]);
}

/// Catches: the first program's stack and image layout changing (cargo mutants: `<<` -> `>>`
/// and `-` -> `+` / `/` in the `INIT_*` constants). The kernel maps, and the library OS reads,
/// these addresses.
#[test]
fn the_first_programs_layout() {
    assert_eq!(INIT_STACK_SIZE, 1 << 20);
    assert_eq!(INIT_START_INFO, INIT_STACK_TOP - PAGE_SIZE);
    assert_eq!(INIT_START_INFO % 16, 0);
    assert_eq!(INIT_IMAGE_LIMIT, 1 << 30);
}

/// Catches: the largest block request refused, or a larger one allowed (cargo mutants: `*` ->
/// `+` in `BLK_MAX_REQUEST`, `>` -> `>=` in `blk_check`).
#[test]
fn a_block_request_of_the_largest_size_passes() {
    assert_eq!(BLK_MAX_REQUEST, 256 * 1024);
    assert_eq!(blk_check(0, 0, BLK_MAX_REQUEST, 1 << 20, 1 << 20), Ok(()));
    assert_eq!(blk_check(0, 0, BLK_MAX_REQUEST + BLK_SECTOR, 1 << 20, 1 << 20), Err(Error::InvalidArgument));
}

/// Catches: a frame buffer whose frame room is wrong (cargo mutants: `-` -> `+` in
/// `NET_MAX_FRAME`), and channels' first buffers computed wrongly (`*` -> `/` in
/// `net_first_buffer`).
#[test]
fn network_buffers_split_evenly_and_hold_a_frame() {
    assert_eq!(NET_MAX_FRAME, NET_BUF_BYTES - NET_FRAME_OFFSET);
    assert!(NET_FRAME_OFFSET + NET_MAX_FRAME <= NET_BUF_BYTES && NET_MAX_FRAME >= 1514);
    assert_eq!([net_first_buffer(0, 4, 100), net_first_buffer(1, 4, 100), net_first_buffer(3, 4, 100)], [0, 25, 75]);
}

/// Catches: any change to the steering hash (cargo mutants: the shifts, `|` -> `&`, `^=` ->
/// `|=`/`&=` in `net_flow_hash`), by known answers computed independently of this code
/// (a Python transcription of the documented mix), and a frame that just holds the ports
/// not being hashed (`<` -> `<=` in `net_steer`'s length check).
#[test]
fn flows_hash_to_known_values_and_steer_by_them() {
    let (guest, peer) = (0x0a00_020f_u32, 0x0a00_0202_u32);
    assert_eq!(net_flow_hash(peer, 40000, guest, 80), 558_889_521);
    assert_eq!(net_flow_hash(peer, 40001, guest, 80), 1_749_160_635);
    // An IPv4 TCP frame cut right after the two ports: 14 + 20 + 4 bytes.
    let mut f = vec![0u8; 14 + 20 + 4];
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[14 + 9] = 6;
    f[14 + 12..14 + 16].copy_from_slice(&peer.to_be_bytes());
    f[14 + 16..14 + 20].copy_from_slice(&guest.to_be_bytes());
    f[34..36].copy_from_slice(&40001u16.to_be_bytes());
    f[36..38].copy_from_slice(&80u16.to_be_bytes());
    assert_eq!(net_steer(&f, 4), 1_749_160_635 % 4);
    assert_eq!(net_steer(&f[..37], 4), 0, "a frame without both ports goes to channel 0");
}
