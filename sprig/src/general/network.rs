//! `uuidv4` and `getHostByName`. Helm replaces Sprig's DNS lookup with a function returning
//! `""` unless `--enable-dns` is given; this pure crate has no resolver, so it always
//! returns `""` (Helm's default).

use flotilla_gotmpl::{ArgType, FuncMap, Signature, Value};

use super::{add, random_fill};

pub(crate) fn register(map: &mut FuncMap) {
    add(
        map,
        "getHostByName",
        Signature::fixed([ArgType::String]),
        |_| Ok(Value::from("")),
    );
    add(map, "uuidv4", Signature::fixed([]), |_| {
        let mut b = [0u8; 16];
        random_fill(&mut b)?;
        b[6] = (b[6] & 0x0f) | 0x40;
        b[8] = (b[8] & 0x3f) | 0x80;
        let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
        Ok(Value::from(format!(
            "{}-{}-{}-{}-{}",
            &hex[..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..]
        )))
    });
}
