//! Meta protocol cases: parsing and errors (after `crates/protocol/tests/it/replies_meta.rs`),
//! then semantics of mg, ms, md, ma, mn and me on stored items.

use crate::differential::harness::{cat, text, text_at_send, Case, Group};

fn errors() -> Vec<Case> {
    let k250 = vec![b'k'; 250];
    let k251 = vec![b'k'; 251];
    let big = vec![b'x'; 2_000_000];
    let o32 = format!("O{}", "x".repeat(31));
    let o33 = format!("O{}", "x".repeat(32));
    let flags17: Vec<u8> = b"abcdefghijklmnopq"
        .iter()
        .flat_map(|&f| [b' ', f])
        .collect();
    let flags18: Vec<u8> = b"abcdefghijklmnopqr"
        .iter()
        .flat_map(|&f| [b' ', f])
        .collect();
    let max_value = vec![b'x'; 1_048_516];

    let mut g = Group::text("meta/dispatch");
    g.c("mn\r\n");
    g.c("mn foo bar\r\n");
    g.c("mx foo\r\n");
    g.c("m\r\n");
    g.c("mg\r\n");
    g.c("ms\r\n");
    g.c("md\r\n");
    g.c("ma\r\n");
    g.c("me\r\n");
    g.c("me a\r\n");
    g.c("me a x\r\n");
    g.c("me Zm9v b\r\n");
    g.c("me foo b\r\n");
    g.c("me !!! b\r\n");
    g.c(cat(&[b"me ", &k251, b"\r\n"]));
    let mut cases = g.cases;

    let mut g = Group::text("meta/mg-errors");
    g.c("mg a\r\n");
    g.c("mg a v\r\n");
    g.c("mg a v q\r\nmn\r\n");
    g.c("mg a k Oabc v\r\n");
    g.c("mg a Oabc k v s t c f h l u P L I\r\n");
    g.c("mg Zm9v b k v\r\n");
    g.c(format!("mg a {o32}\r\n"));
    g.c(format!("mg a {o33}\r\n"));
    g.c("mg a O\r\n");
    g.c("mg a 1\r\n");
    g.c("mg a E\r\n");
    g.c("mg a S\r\n");
    g.c("mg a v v\r\n");
    g.c("mg a \x7f\r\n");
    g.c(b"mg a \x80\r\n".as_slice());
    g.c("mg a Tabc\r\n");
    g.c("mg a T\r\n");
    g.c("mg a Nabc\r\n");
    g.c("mg a Rabc\r\n");
    g.c("mg a Cabc\r\n");
    g.c("mg a Fabc\r\n");
    g.c("mg a Fabc Tabc\r\n");
    g.c("mg a Tabc Fabc\r\n");
    g.c("mg a Jabc\r\n");
    g.c("mg a Dabc\r\n");
    g.c("mg a Jabc Dabc\r\n");
    g.c("mg a Mxx\r\n");
    g.c("mg a MX\r\n");
    g.c("mg a b\r\n");
    g.c("mg !!!! b\r\n");
    g.c("mg Zm9 b\r\n");
    g.c("mg a b Tabc\r\n");
    g.c("mg a Tabc b\r\n");
    g.c("mg a Tabc v v\r\n");
    g.c(cat(&[b"mg a", &flags17, b"\r\n"]));
    g.c(cat(&[b"mg a", &flags18, b"\r\n"]));
    g.c(cat(&[b"mg ", &k251, b" v\r\n"]));
    g.c(cat(&[b"mg ", &k250, b" v\r\n"]));
    cases.extend(g.cases);

    let mut g = Group::text("meta/ms-errors");
    g.c("ms a 1\r\nx\r\n");
    g.c("ms a 1 q\r\nx\r\nmn\r\n");
    g.c("ms a 1 k Oab q\r\nx\r\nmn\r\n");
    g.c("ms a 1 k Oab\r\nx\r\n");
    g.c("ms Zm9v 1 b k Oop T0 F5\r\nx\r\n");
    g.c("ms a 1 MS\r\nx\r\n");
    g.c("ms a 1 ME\r\nx\r\n");
    g.c("ms a 1 MR\r\nx\r\n");
    g.c("ms a 1 MA\r\nx\r\n");
    g.c("ms a 1 MP\r\nx\r\n");
    g.c("ms a 1 C5\r\nx\r\n");
    g.c("ms a 1 MR C5\r\nx\r\n");
    g.c("ms a 1 q MR\r\nx\r\n");
    g.c("ms a\r\n");
    g.c("ms a abc\r\nx\r\n");
    g.c("ms a -1\r\nx\r\n");
    g.c("ms a 1 MX\r\nx\r\n");
    g.c("ms a 1 Mxx\r\nx\r\n");
    g.c("ms a 1 Fabc\r\nx\r\n");
    g.c("ms a 1 T\r\nx\r\n");
    g.c("ms a 1 v v\r\nx\r\n");
    g.c("ms a 1 Z\r\nx\r\n");
    g.c("ms a 1 b\r\nx\r\n");
    g.c(format!("ms a 1 {o33}\r\nx\r\n"));
    g.c(format!("ms a 1 {o33} MX\r\nx\r\n"));
    g.c("ms a 1 q\r\nxy\r\nmn\r\n");
    g.c("ms a 1\r\nxy\r\n");
    g.c("ms a 1 k c O q F T I P L b s t h z\r\nx\r\n");
    g.c(cat(&[b"ms ", &k251, b" 1\r\nx\r\n"]));
    g.c(cat(&[b"ms a 1", &flags17, b"\r\nx\r\n"]));
    g.c(cat(&[b"ms a 2000000\r\n", &big, b"\r\nmn\r\n"]));
    g.c(cat(&[b"ms a 2000000 q\r\n", &big, b"\r\nmn\r\n"]));
    g.c(cat(&[b"ms k 1048516\r\n", &max_value, b"\r\n"]));
    g.c(cat(&[
        b"ms k 1048513 F1\r\n",
        &max_value[..1_048_513],
        b"\r\n",
    ]));
    g.c(cat(&[
        b"ms ZmZm 1048514 b\r\n",
        &max_value[..1_048_514],
        b"\r\n",
    ]));
    g.c(cat(&[
        b"ms ZmZm 1048515 b\r\n",
        &max_value[..1_048_515],
        b"\r\n",
    ]));
    cases.extend(g.cases);

    let mut g = Group::text("meta/md-ma-errors");
    g.c("md a\r\n");
    g.c("md a q\r\nmn\r\n");
    g.c("md a k Oab\r\n");
    g.c("md a x\r\n");
    g.c("md a v v\r\n");
    g.c("md a Tabc\r\n");
    g.c(format!("md a {o33}\r\n"));
    g.c(cat(&[b"md a", &flags18, b"\r\n"]));
    g.c(cat(&[b"md ", &k251, b"\r\n"]));
    g.c("ma a\r\n");
    g.c("ma a q D5 MD\r\n");
    g.c("ma a Oab k M+\r\n");
    g.c("ma a MX\r\n");
    g.c("ma a Mxx\r\n");
    g.c("ma a Dabc\r\n");
    g.c("ma a Jabc\r\n");
    g.c(format!("ma a {o33}\r\n"));
    g.c(cat(&[b"ma a", &flags18, b"\r\n"]));
    g.c(cat(&[b"ma a", &flags17, b"\r\n"]));
    cases.extend(g.cases);
    cases
}

fn semantics() -> Vec<Case> {
    let mut g = Group::text("meta/semantics");
    // mg.
    g.named(
        "mg flags v f t s k c O on a hit",
        vec![text(
            "ms k 5 F33 T100\r\nhello\r\nmg k v f t s k c Oxyz\r\nmg k s\r\nmg k\r\nmg k k v\r\n",
        )],
    );
    g.named(
        "mg on an item stored by set, and get on one stored by ms",
        vec![text(
            "set a 77 0 2\r\naa\r\nmg a v f t c\r\nms b 2 F88\r\nbb\r\nget b\r\ngets b\r\n",
        )],
    );
    g.named(
        "mg q hides misses only",
        vec![text(
            "ms k 1\r\nx\r\nmg nope v q k Oa\r\nmg k v q k Ob\r\nmg nope q\r\nmg k q\r\nmn\r\n",
        )],
    );
    g.named(
        "mg h and l: hit before and last access",
        vec![text("ms k 1\r\nx\r\nmg k h l\r\nmg k h l v\r\nmg k h\r\n")],
    );
    g.named(
        "mg T touches, t reports",
        vec![text(
            "ms k 1 T0\r\nx\r\nmg k t\r\nmg k T100 t v\r\nmg k t\r\nmg k T-1 v\r\nmg k v\r\n",
        )],
    );
    g.named(
        "mg N vivifies a miss, then Z",
        vec![text(
            "mg k N30 v c t s f\r\nmg k N30 v t\r\nmg k v\r\nms k 1\r\nx\r\nmg k v\r\n",
        )],
    );
    g.named(
        "mg R recache window",
        vec![text(
            "ms k 1 T10\r\nx\r\nmg k R30 v t\r\nmg k R30 v t\r\nmg k R5 v t\r\n",
        )],
    );
    g.named(
        "mg base64 key",
        vec![text(
            "ms Zm9v 3 b\r\nbar\r\nmg Zm9v b k v\r\nget foo\r\nmg foo v s\r\n",
        )],
    );
    g.named(
        "mg E is not a 1.6.18 flag on hits either",
        vec![text("ms k 1\r\nx\r\nmg k E5 v\r\n")],
    );
    // ms.
    g.named(
        "ms modes: E add, A append, P prepend, R replace, S set",
        vec![text(
            "ms k 1 ME\r\na\r\nms k 1 ME\r\nb\r\nms k 1 MA\r\nc\r\nms k 1 MP\r\nd\r\n\
             ms k 1 MR\r\ne\r\nmg k v\r\nms k 1 MS\r\nf\r\nmg k v\r\nms z 1 MR\r\nz\r\n\
             ms z 1 MA\r\nz\r\nms k 1 Ma\r\ng\r\nms k 1 Ms\r\nh\r\nmg k v\r\n",
        )],
    );
    g.named(
        "ms append with N vivifies",
        vec![text(
            "ms k 1 MA N100\r\nx\r\nmg k v t\r\nms j 1 MP N0\r\ny\r\nmg j v\r\n",
        )],
    );
    g.named(
        "ms F and T, read back",
        vec![text(
            "ms k 2 F4294967295 T1000\r\nab\r\nmg k f t v\r\nget k\r\n",
        )],
    );
    g.named(
        "ms c returns the new CAS; C compares",
        vec![
            text("ms k 1 c\r\na\r\n"),
            text("ms k 1 C$C0 c\r\nb\r\nmg k v c\r\n"),
            text("ms k 1 C$C0\r\nc\r\nmg k v\r\n"),
        ],
    );
    g.named(
        "ms C with a stale token and I marks stale",
        vec![
            text("ms k 1\r\na\r\nmg k c\r\n"),
            text("ms k 1 I C$X0\r\nb\r\nmg k v c\r\nms k 1 C$X0\r\nb\r\n"),
        ],
    );
    g.named(
        "ms q reports only failures",
        vec![text(
            "ms k 1 q\r\na\r\nms k 1 q ME\r\nb\r\nms k 1 q MR Ok1 k\r\nc\r\nms z 1 q MR Ok2 k\r\nd\r\n\
             mg k v\r\n",
        )],
    );
    g.named(
        "ms base64 key, k echoes it encoded",
        vec![text(
            "ms Zm9vYmFy 2 b k\r\nhi\r\nget foobar\r\nmg Zm9vYmFy b v k\r\n",
        )],
    );
    g.named(
        "ms invalidate then mg shows win/stale",
        vec![text(
            "ms k 1 T100\r\na\r\nmd k I T30\r\nmg k v c t\r\nmg k v c t\r\nms k 1 I\r\nb\r\nmg k v\r\n",
        )],
    );
    g.named(
        "leases: the mg N winner stores with its CAS, a loser's stale CAS is refused",
        vec![text(
            "mg k N30 c v\r\nmg k N30 c v\r\nms k 3 C$C1\r\nnew\r\nms k 3 C$C1\r\nold\r\n\
             mg k v c\r\n",
        )],
    );
    g.named(
        "leases: md I keeps the value, one reader wins, a set clears the flags",
        vec![text(
            "ms k 2 T100\r\nv1\r\nmd k I\r\nmd nope I\r\nmg k v N30\r\nmg k v R30\r\n\
             mg k s\r\nget k\r\nms k 2\r\nv2\r\nmg k v\r\nmd k I q\r\nmn\r\n",
        )],
    );
    g.named(
        "leases: writes to an invalidated value (touch and a same-length incr keep it stale)",
        vec![text(
            "ms k 1 T100\r\n5\r\nmd k I\r\nincr k 2\r\nmg k v c\r\nmd k I\r\nincr k 200\r\n\
             mg k v\r\nmd k I\r\ntouch k 50\r\nmg k v\r\nappend k 0 0 1\r\nx\r\nmg k v\r\n\
             md k I\r\nreplace k 0 0 1\r\ny\r\nmg k v\r\nmd k I\r\nadd k 0 0 1\r\nz\r\n\
             cas k 0 0 1 $X1\r\nq\r\ndecr k 1\r\nmg k v\r\n",
        )],
    );
    g.named(
        "leases: mg N on a hit, and R outside the window",
        vec![text(
            "ms k 1 T100\r\nx\r\nmg k N30 v\r\nmg k R10 v\r\nmg k R200 v\r\nmg k R200 v\r\n",
        )],
    );
    g.named(
        "ms with a zero-length value",
        vec![text("ms k 0 F1\r\n\r\nmg k v f s\r\n")],
    );
    // md.
    g.named(
        "md hit then miss, q and k and O",
        vec![text(
            "ms k 1\r\nx\r\nmd k k Oa\r\nmd k k Ob\r\nms k 1\r\nx\r\nmd k q\r\nmd k q\r\nmg k v\r\n",
        )],
    );
    g.named(
        "md C compares the token",
        vec![
            text("ms k 1\r\nx\r\nmg k c\r\n"),
            text("md k C$X0\r\nmg k v\r\nmd k C$C0\r\nmg k v\r\n"),
        ],
    );
    g.named(
        "md I on a missing key, md x",
        vec![text("md nope I\r\nmd nope I q\r\nmn\r\n")],
    );
    g.named(
        "md base64 key",
        vec![text("set foo 0 0 1\r\nx\r\nmd Zm9v b k\r\nget foo\r\n")],
    );
    // ma.
    g.named(
        "ma default increments by one",
        vec![text("ms n 1\r\n5\r\nma n\r\nmg n v\r\nma n v\r\n")],
    );
    g.named(
        "ma modes, delta, decr floor",
        vec![text(
            "ms n 2\r\n10\r\nma n MI D5 v\r\nma n M+ v\r\nma n MD D3 v\r\nma n M- v\r\n\
             ma n Md D100 v\r\nma n Mi v\r\n",
        )],
    );
    g.named(
        "ma N J vivify with an initial value",
        vec![text(
            "ma n N100 J13 v t\r\nma n v\r\nma m N0 v\r\nma o J5 v\r\nma p N100 J18446744073709551615 v\r\n\
             ma p v\r\n",
        )],
    );
    g.named(
        "ma wraps at 2^64",
        vec![text(
            "ms n 20\r\n18446744073709551615\r\nma n v\r\nma n D18446744073709551615 v\r\n",
        )],
    );
    g.named(
        "ma flags t c k O q",
        vec![text(
            "ms n 1 T100\r\n1\r\nma n t c v k Oa\r\nma n q\r\nma n q v\r\nma zz q\r\nmg n v c\r\n",
        )],
    );
    g.named(
        "ma on non-numeric and padded values",
        vec![text(
            "ms a 3\r\nabc\r\nma a v\r\nms b 3\r\n100\r\nma b MD v\r\nmg b v s\r\nms c 3\r\n  7\r\nma c v\r\n",
        )],
    );
    g.named(
        "ma C compares the token",
        vec![
            text("ms n 1\r\n1\r\nmg n c\r\n"),
            text("ma n C$X0 v\r\nma n C$C0 v\r\n"),
        ],
    );
    g.named(
        "ma base64 key",
        vec![text("set n 0 0 1\r\n1\r\nma bg== b v k\r\n")],
    );
    // mn and me.
    g.named(
        "mn between commands",
        vec![text(
            "mn\r\nms k 1 q\r\nx\r\nmn\r\nmg k v q\r\nmg z v q\r\nmn\r\n",
        )],
    );
    g.named(
        "me on a hit and a miss",
        vec![text(
            "ms k 1 T100\r\nx\r\nme k\r\nme nope\r\nmg k v\r\nme k\r\nme Zm9v b\r\n",
        )],
    );
    g.named(
        "pipelined meta mix",
        vec![text(
            "ms a 1 T0 F1\r\n1\r\nms b 2 q\r\n22\r\nmg a v f k\r\nma a v\r\nmd b q\r\nmg b v\r\n\
             ma c N0 J100 v\r\nmg c v s\r\nmn\r\nms a 1 MA\r\n9\r\nmg a v\r\nget a c\r\n",
        )],
    );
    g.named(
        "an absolute time already past: gat and mg T return the item one last time",
        vec![text_at_send(|| {
            let past = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs()
                - 100;
            format!(
                "set a 0 0 1\r\nx\r\ngat {past} a\r\nget a\r\nset b 0 0 1\r\ny\r\n\
                 mg b v T{past}\r\nmg b v\r\nset c 0 0 1\r\nz\r\ntouch c {past}\r\nget c\r\n"
            )
            .into_bytes()
        })],
    );
    g.cases
}

/// Every meta-protocol case.
pub fn cases() -> Vec<Case> {
    let mut v = errors();
    v.extend(semantics());
    v
}
