//! Placeholder module: functions land here.
use flotilla_gotmpl::FuncMap;

pub(crate) fn register(_map: &mut FuncMap) {}
