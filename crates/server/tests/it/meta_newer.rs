//! Meta-protocol features memcached 1.6.45 has and 1.6.18 lacked, through a real socket:
//! client-chosen CAS (`E`), a CAS that withholds an unchanged value (`mg C`), emptying a value
//! (`md x`) and append with autovivify (`ms MA N`). Expected bytes were checked against
//! memcached 1.6.45 for the same exchange.

use crate::common;

use common::TestServer;

#[test]
fn e_sets_the_cas_of_what_ms_mg_ma_and_md_write() {
    let s = TestServer::start();
    let mut c = s.connect();
    c.check("ms k 2 E973\r\nji\r\n", "HD\r\n");
    c.check("mg k c\r\n", "HD c973\r\n");
    c.check("gets k\r\n", "VALUE k 0 2 973\r\nji\r\nEND\r\n");
    c.check("ms k 2 c C973 E4000\r\nlo\r\n", "HD c4000\r\n");
    c.check("cas k 0 0 1 973\r\nx\r\n", "EXISTS\r\n");
    c.check("cas k 0 0 1 4000\r\nx\r\n", "STORED\r\n");
    // A new placeholder takes it as its CAS; an existing item ignores it.
    c.check("mg viv c v N30 E9876\r\n", "VA 0 c9876 W\r\n\r\n");
    c.check("mg viv c E5\r\n", "HD c9876 Z\r\n");
    // ma: on the counter it creates, and on the one it changes.
    c.check("ma n v N0 c E4321 J5\r\n", "VA 1 c4321\r\n5\r\n");
    c.check("ma n c v E8765\r\n", "VA 1 c8765\r\n6\r\n");
    // md I: the stale copy keeps the new CAS, also once a reader wins its token.
    c.check("ms d 2 E1234\r\nmE\r\n", "HD\r\n");
    c.check("md d C1234 E5678 I\r\n", "HD\r\n");
    c.check("mg d c\r\n", "HD c5678 X W\r\n");
    c.check(
        "mg a E\r\n",
        "CLIENT_ERROR bad token in command line format\r\n",
    );
}

#[test]
fn a_matching_cas_withholds_the_value() {
    let s = TestServer::start();
    let mut c = s.connect();
    c.check("ms k 2 E77\r\nva\r\n", "HD\r\n");
    c.check("mg k C77 v c\r\n", "HD c77\r\n");
    c.check("mg k C78 v c\r\n", "VA 2 c77\r\nva\r\n");
}

#[test]
fn md_x_empties_the_value_and_keeps_the_item() {
    let s = TestServer::start();
    let mut c = s.connect();
    c.check("ms k 2 T50 F5\r\nmx\r\n", "HD\r\n");
    c.check("md k x\r\n", "HD\r\n");
    c.check("mg k v f\r\n", "VA 0 f0\r\n\r\n");
    c.check("md none x\r\n", "NF\r\n");
    c.check("ms k 2 T50\r\nmz\r\n", "HD\r\n");
    c.check("md k x I\r\n", "HD\r\n");
    c.check("mg k v\r\n", "VA 0 X W\r\n\r\n");
}

#[test]
fn append_with_n_creates_a_missing_item() {
    let s = TestServer::start();
    let mut c = s.connect();
    c.check("ms k 2 MA N100\r\nmo\r\n", "HD\r\n");
    c.check("mg k v\r\n", "VA 2\r\nmo\r\n");
    c.check("ms k 2 MA N100 s\r\nre\r\n", "HD s4\r\n");
    c.check("ms j 1 MP\r\ny\r\n", "NS\r\n");
}
