//! URL functions (`urlParse`, `urlJoin`) are not implemented yet.

use flotilla_gotmpl::FuncMap;

pub(crate) fn register(_map: &mut FuncMap) {}
