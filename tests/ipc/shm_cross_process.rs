//! A real memfd SMB shared with a child process: the child attaches from
//! an inherited fd (seals checked), sees the parent's bytes and chunk
//! state, reads the committed chunk like the service would and writes back.
//!
//! The test re-runs this test binary as the child (`SHM_CHILD_FD` set).

use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Command;

use tracebox::base::shm::{AttachOptions, Shm};
use tracebox::tracing::core::smb_abi::{ChunkHeader, PageLayout, SmbAbi};

const SIZE: usize = 16 * 4096;
const CHILD_ENV: &str = "SHM_CHILD_FD";

fn child(fd_num: &str) -> i32 {
    // Re-open our inherited descriptor as an owned fd.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/self/fd/{fd_num}"))
        .unwrap();
    let shm = Shm::attach(
        OwnedFd::from(file),
        AttachOptions {
            require_seals: true,
            expected_size: Some(SIZE),
        },
    )
    .expect("attach");
    let abi = SmbAbi::new(shm.mem().clone(), 4096).unwrap();
    let c = abi
        .try_acquire_chunk_for_reading(3, 1)
        .expect("parent's chunk is Complete");
    let mut payload = Vec::new();
    let h = abi.read_chunk(&c, &mut payload);
    if h != (ChunkHeader {
        chunk_id: 42,
        writer_id: 5,
        packet_count: 1,
        flags: 0,
    }) || &payload[..6] != b"\x05hello"
    {
        return 2;
    }
    abi.release_chunk_as_free(c).unwrap();
    shm.mem().write(SIZE - 5, b"child");
    0
}

#[test]
fn child_process_attaches_and_shares_the_smb() {
    if let Ok(fd) = std::env::var(CHILD_ENV) {
        std::process::exit(child(&fd));
    }
    let shm = Shm::create(SIZE).unwrap();
    let abi = SmbAbi::new(shm.mem().clone(), 4096).unwrap();
    assert!(abi.try_partition_page(3, PageLayout::Div2));
    let hdr = ChunkHeader {
        chunk_id: 42,
        writer_id: 5,
        packet_count: 0,
        flags: 0,
    };
    let c = abi.try_acquire_chunk_for_writing(3, 1, &hdr).unwrap();
    abi.increment_packet_count(&c);
    abi.mem().write(c.payload_offset(), b"\x05hello");
    abi.release_chunk_as_complete(c).unwrap();

    // An inheritable duplicate (the original is CLOEXEC).
    let inheritable = nix::unistd::dup(shm.fd().as_raw_fd()).unwrap();
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "shm_cross_process::child_process_attaches_and_shares_the_smb",
            "--nocapture",
        ])
        .env(CHILD_ENV, inheritable.to_string())
        .status()
        .unwrap();
    nix::unistd::close(inheritable).unwrap();
    assert!(status.success(), "child failed: {status:?}");

    let mut back = [0u8; 5];
    assert!(shm.mem().read(SIZE - 5, &mut back));
    assert_eq!(&back, b"child");
    assert_eq!(
        abi.page_bitmap(3).unwrap(),
        0,
        "child freed the only busy chunk"
    );
    assert!(abi.chunk_state(3, 1).is_err(), "page unpartitioned again");
}
