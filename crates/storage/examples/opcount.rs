//! A fixed amount of engine work for instruction counting under callgrind (whose counts are
//! repeatable on this shared, noisy machine, unlike timings):
//!
//! ```sh
//! cargo build --release -p memfleet-storage --example opcount
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/opcount get 0
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/opcount get 1000000
//! ```
//!
//! The difference of the two totals divided by 1,000,000 is the cost of one operation.
//! Operations: `get` (hit), `miss`, `set`, `mix` (90% get, 10% set).

use memfleet_storage::{Cache, Config, Expiry};

const KEYS: usize = 100_000;

fn key(buf: &mut [u8; 16], prefix: &[u8; 5], i: usize) {
    buf[..5].copy_from_slice(prefix);
    let mut n = i;
    for b in buf[5..].iter_mut().rev() {
        *b = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let op = args.next().unwrap_or_else(|| "get".into());
    let n: usize = args.next().map_or(1_000_000, |s| s.parse().expect("count"));
    let cache = Cache::new(Config::new(256 << 20)).expect("cache");
    let mut h = cache.handle();
    let mut k = [0u8; 16];
    for i in 0..KEYS {
        key(&mut k, b"key::", i);
        h.set(&k, &[b'v'; 64], 0, Expiry::After(3600)).expect("set");
    }
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut sum = 0usize;
    for i in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let which = (x % KEYS as u64) as usize;
        match op.as_str() {
            "get" => {
                key(&mut k, b"key::", which);
                sum += h.get(&k).map_or(0, |it| it.value().len());
            }
            "miss" => {
                key(&mut k, b"nope:", which);
                sum += h.get(&k).map_or(0, |it| it.value().len());
            }
            "set" => {
                key(&mut k, b"key::", which);
                h.set(&k, &[b'w'; 64], 0, Expiry::After(3600)).expect("set");
            }
            "mix" => {
                key(&mut k, b"key::", which);
                if i % 10 == 0 {
                    h.set(&k, &[b'w'; 64], 0, Expiry::After(3600)).expect("set");
                } else {
                    sum += h.get(&k).map_or(0, |it| it.value().len());
                }
            }
            other => panic!("unknown op {other}"),
        }
    }
    println!("{op} x{n}: checksum {sum}");
}
