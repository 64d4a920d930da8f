//! `flotilla_cli::memory::prepare_heap` on the real allocator and kernel: run as its own
//! process without the test harness (`harness = false` in Cargo.toml), because the set-up
//! is meant for the main thread of a fresh process, before other threads exist.

use flotilla_cli::memory::{HUGE_BYTES, prepare_heap};

/// The `AnonHugePages` of the mapping of /proc/self/smaps that contains `addr`, in KiB.
fn anon_huge_kib_at(addr: usize) -> Option<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("reading /proc/self/smaps");
    let mut inside = false;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((lo, hi)) = first.split_once('-')
            && let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
        {
            inside = lo <= addr && addr < hi;
            continue;
        }
        if inside && let Some(rest) = line.strip_prefix("AnonHugePages:") {
            return rest.trim().trim_end_matches("kB").trim().parse().ok();
        }
    }
    None
}

fn main() {
    let setup = prepare_heap();
    let thp =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    let thp_on = thp.contains("[always]") || thp.contains("[madvise]");
    if !cfg!(all(target_os = "linux", target_env = "gnu")) || !thp_on {
        // Without glibc or huge pages the process must simply run on as before.
        let v = vec![3u8; 4 << 20];
        assert!(v.iter().all(|&b| b == 3));
        println!("memory: no transparent huge pages here ({thp:?}); heap set-up {setup:?}");
        return;
    }
    assert_eq!(setup.huge_len, HUGE_BYTES, "{setup:?}");
    assert_eq!(setup.huge_start % (2 << 20), 0, "{setup:?}");

    // Blocks allocated from now on come from the heap right at the advised range (big ones
    // too: no mmap), which is then backed by a huge page; the data stays intact.
    let blocks: Vec<Vec<u64>> = (0..48u64).map(|i| vec![i; 8 << 10]).collect();
    let range = setup.huge_start..setup.huge_start + setup.huge_len;
    let inside = blocks
        .iter()
        .filter(|b| range.contains(&(b.as_ptr() as usize)))
        .count();
    assert!(
        inside >= 24,
        "{inside} of 48 blocks of 64 KiB in {range:x?}"
    );
    let big = vec![9u8; 3 << 20];
    let brk = std::fs::read_to_string("/proc/self/maps")
        .expect("reading /proc/self/maps")
        .lines()
        .any(|l| {
            l.ends_with("[heap]") && {
                let (lo, rest) = l.split_once('-').unwrap_or(("0", "0"));
                let hi = rest.split_whitespace().next().unwrap_or("0");
                let p = big.as_ptr() as usize;
                usize::from_str_radix(lo, 16).unwrap_or(0) <= p
                    && p < usize::from_str_radix(hi, 16).unwrap_or(0)
            }
        });
    assert!(
        brk,
        "a 3 MiB block comes from the brk heap, not a mapping of its own"
    );
    // The ~6 MiB touched so far lie on whole huge pages: at least the first, and only whole
    // ones (the range is advised from a 2 MiB boundary).
    let huge = anon_huge_kib_at(setup.huge_start).unwrap_or(0);
    assert!(
        huge >= 2048 && huge.is_multiple_of(2048) && huge <= (HUGE_BYTES / 1024) as u64,
        "{huge} KiB of huge pages in the advised range"
    );
    for (i, b) in blocks.iter().enumerate() {
        assert!(b.iter().all(|&x| x == i as u64));
    }
    assert!(big.iter().all(|&b| b == 9));
    println!("memory: heap huge page at {:#x}: ok", setup.huge_start);
}
