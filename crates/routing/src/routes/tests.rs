//! The route types' tables read as written, and refused with the operator's words.

use super::*;
use crate::from_toml;

fn route(table: &str) -> Result<RouteKind, String> {
    let text = format!(
        "[pools.a]\nservers = [\"10.0.0.1:1\"]\n[pools.b]\nservers = [\"10.0.0.2:1\"]\n\
         [routes.r]\n{table}"
    );
    from_toml(&text)
        .map(|c| c.routes[0].kind.clone())
        .map_err(|e| e.to_string())
}

#[test]
fn the_operator_routes_read_as_written() {
    assert_eq!(route("type = \"null\"\n"), Ok(RouteKind::Null(Null {})));
    assert_eq!(
        route("type = \"error\"\n"),
        Ok(RouteKind::Error(ErrorAnswer {
            message: "error route".into()
        }))
    );
    assert_eq!(
        route("type = \"ttl\"\nchild = \"a\"\nmax_ttl = 3600\n"),
        Ok(RouteKind::Ttl(TtlRewrite {
            child: "a".into(),
            max_ttl: Some(3600),
            set_ttl: None
        }))
    );
    assert_eq!(
        route("type = \"failover\"\nchildren = [\"a\", \"b\"]\nmiss = true\n"),
        Ok(RouteKind::Failover(Failover {
            children: vec!["a".into(), "b".into()],
            errors: FailoverErrors::default(),
            miss: true,
            order: FailoverOrder::InOrder,
            limit: None,
        }))
    );
    let RouteKind::Failover(f) = route(
        "type = \"failover\"\nchildren = [\"a\", \"b\"]\norder = \"rendezvous\"\n\
         failover_errors = [\"timeout\"]\nfailover_limit = { rate = 0.5, burst = 10 }\n",
    )
    .unwrap() else {
        panic!()
    };
    assert_eq!(f.order, FailoverOrder::Rendezvous);
    assert!(f.errors.timeout && !f.errors.connect && !f.errors.server_error);
    assert_eq!(
        f.limit,
        Some(FailoverLimit {
            rate: 0.5,
            burst: 10.0
        })
    );
    assert_eq!(
        route("type = \"shadow\"\nmain = \"a\"\nshadow = \"b\"\nkey_fraction = [0.0, 0.1]\n"),
        Ok(RouteKind::Shadow(Shadow {
            main: "a".into(),
            shadow: "b".into(),
            keys: ShadowKeys::KeyFraction(0.0, 0.1),
            max_pending: 1024,
        }))
    );
    assert_eq!(
        route("type = \"shadow\"\nmain = \"a\"\nshadow = \"b\"\nindex_range = [0, 2]\n").map(
            |k| matches!(
                k,
                RouteKind::Shadow(Shadow {
                    keys: ShadowKeys::IndexRange(0, 2),
                    ..
                })
            )
        ),
        Ok(true)
    );
    assert_eq!(
        route("type = \"migrate\"\nfrom = \"a\"\nto = \"b\"\nstart_time = 1767225600\n"),
        Ok(RouteKind::Migrate(Migrate {
            from: "a".into(),
            to: "b".into(),
            start_time: 1_767_225_600,
            interval: 3600,
        }))
    );
    assert_eq!(
        route("type = \"bigvalue\"\nchild = \"a\"\nthreshold = 524288\n"),
        Ok(RouteKind::BigValue(BigValue {
            child: "a".into(),
            threshold: 524_288,
            item_size_max: 16 << 20,
        }))
    );
    assert_eq!(
        route("type = \"all-fastest\"\nchildren = [\"a\", \"b\"]\n"),
        Ok(RouteKind::AllFastest(Fanout {
            children: vec!["a".into(), "b".into()]
        }))
    );
    for (table, why) in [
        (
            "type = \"null\"\nchild = \"a\"\n",
            "a null route takes no \"child\"",
        ),
        ("type = \"error\"\nmessage = \"a\\nb\"\n", "one line"),
        (
            "type = \"ttl\"\nchild = \"a\"\n",
            "needs \"max_ttl\" or \"set_ttl\"",
        ),
        (
            "type = \"ttl\"\nchild = \"a\"\nmax_ttl = 0\n",
            "expire at once",
        ),
        ("type = \"ttl\"\nmax_ttl = 5\n", "needs \"child\""),
        ("type = \"failover\"\n", "needs \"children\""),
        (
            "type = \"failover\"\nchildren = [\"a\"]\nfailover_errors = [\"miss\"]\n",
            "unknown failover error \"miss\"",
        ),
        (
            "type = \"failover\"\nchildren = [\"a\"]\norder = \"random\"\n",
            "unknown failover order",
        ),
        (
            "type = \"failover\"\nchildren = [\"a\"]\nfailover_limit = { rate = 2.0 }\n",
            "rate = 2",
        ),
        (
            "type = \"gutter\"\nmain = \"a\"\ngutter = \"b\"\ngutter_ttl = \"x\"\n",
            "gutter_ttl: invalid type: string",
        ),
        (
            "type = \"failover\"\nchildren = [\"a\"]\nworkers = [0]\n",
            "it needs listen",
        ),
        ("main = \"a\"\n", "a route needs a type (prefix, operation,"),
        ("type = 5\n", "type must be a string"),
        (
            "type = \"shadow\"\nmain = \"a\"\nshadow = \"b\"\nindex_range = [0, 1]\nmax_pending = 0\n",
            "max_pending = 0",
        ),
        (
            "type = \"all-initial\"\nchildren = [\"c\"]\n",
            "no pool or route named \"c\"",
        ),
    ] {
        let err = route(table).unwrap_err();
        assert!(err.contains(why), "{table}: {err}");
    }
}
