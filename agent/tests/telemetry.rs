//! `telemetry::init_logging` installs the process-wide subscriber, so it is tested in its own
//! test binary (its own process): a unit test would change the logging of every other test.

use flotilla_agent::telemetry::{LogFormat, LoggingError, init_logging};

#[test]
fn init_logging_installs_once_and_a_second_call_is_an_error_not_a_panic() {
    init_logging(LogFormat::Json).expect("the first call installs the subscriber");
    assert!(tracing::dispatcher::has_been_set());
    let second = init_logging(LogFormat::Text).expect_err("a subscriber is already set");
    assert!(matches!(second, LoggingError::Install(_)), "{second:?}");
}
