//! The root suite's text connection: the test kit's (`memfleet_testkit::TextConn`).

pub use memfleet_testkit::TextConn as Conn;
