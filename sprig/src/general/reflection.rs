//! Type reflection: `typeOf`, `typeIs`, `typeIsLike`, `kindOf`, `kindIs`, `deepEqual`.

use flotilla_gotmpl::{ArgType, FuncMap, Signature, Value};

use super::{add, arg_str};

use ArgType::{Any, String as Str};

pub(crate) fn register(map: &mut FuncMap) {
    add(map, "typeOf", Signature::fixed([Any]), |a| {
        Ok(Value::from(a[0].type_name()))
    });
    add(map, "typeIs", Signature::fixed([Str, Any]), |a| {
        Ok(Value::Bool(arg_str(a, 0) == a[1].type_name()))
    });
    add(map, "typeIsLike", Signature::fixed([Str, Any]), |a| {
        let (want, got) = (arg_str(a, 0), a[1].type_name());
        Ok(Value::Bool(want == got || format!("*{want}") == got))
    });
    add(map, "kindOf", Signature::fixed([Any]), |a| {
        Ok(Value::from(a[0].kind().name()))
    });
    add(map, "kindIs", Signature::fixed([Str, Any]), |a| {
        Ok(Value::Bool(arg_str(a, 0) == a[1].kind().name()))
    });
    add(map, "deepEqual", Signature::fixed([Any, Any]), |a| {
        Ok(Value::Bool(a[0].deep_equal(&a[1])))
    });
}
