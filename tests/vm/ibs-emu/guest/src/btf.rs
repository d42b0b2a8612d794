//! Just enough of the kernel's BTF (Documentation/bpf/btf.rst, include/uapi/linux/btf.h) to find
//! where a struct member sits: the task channel reads `task_struct.tgid` of the task being
//! switched in, and that offset differs between kernel builds. A BTF crate (aya-obj's) parses
//! all of it for CO-RE relocations and program loading; one member's offset is a walk of the
//! type section.

/// `BTF_MAGIC` (include/uapi/linux/btf.h).
const MAGIC: u16 = 0xeb9f;
/// `struct btf_header` is 24 bytes in version 1.
const HEADER_MIN: usize = 24;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;

/// One type of the type section, with its trailing data.
struct Type<'a> {
    name_off: u32,
    kind: u32,
    kind_flag: bool,
    /// `size` for structs and unions, `type` for the kinds that refer to one.
    size_type: u32,
    /// The `vlen` records after the type (members for a struct or union).
    extra: &'a [u8],
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Bytes that follow a type of `kind` with `vlen` records (btf.rst, "Type encoding").
fn extra_len(kind: u32, vlen: usize) -> Result<usize, String> {
    Ok(match kind {
        // INT, VAR, DECL_TAG: one u32.
        1 | 14 | 17 => 4,
        // PTR, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT, FUNC, FLOAT, TYPE_TAG: nothing.
        2 | 7 | 8 | 9 | 10 | 11 | 12 | 16 | 18 => 0,
        // ARRAY: struct btf_array.
        3 => 12,
        // STRUCT, UNION: struct btf_member; DATASEC: struct btf_var_secinfo; ENUM64.
        4 | 5 | 15 | 19 => 12 * vlen,
        // ENUM: struct btf_enum; FUNC_PROTO: struct btf_param.
        6 | 13 => 8 * vlen,
        k => return Err(format!("BTF: unknown type kind {k}")),
    })
}

/// The BTF's types, indexed by type id (id 0 is void and has no entry: index 0 is id 1).
fn types(btf: &[u8]) -> Result<(Vec<Type<'_>>, &[u8]), String> {
    let magic = btf.get(0..2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    if magic != Some(MAGIC) {
        return Err("BTF: bad magic (not little-endian BTF)".into());
    }
    let field = |at| {
        u32_at(btf, at)
            .map(|v| v as usize)
            .ok_or("BTF: short header")
    };
    let hdr_len = field(4)?;
    if hdr_len < HEADER_MIN {
        return Err(format!("BTF: header of {hdr_len} bytes"));
    }
    let (type_off, type_len, str_off, str_len) = (field(8)?, field(12)?, field(16)?, field(20)?);
    let section = |off: usize, len: usize, what| {
        btf.get(hdr_len + off..hdr_len + off + len)
            .ok_or(format!("BTF: {what} section beyond the data"))
    };
    let type_sec = section(type_off, type_len, "type")?;
    let strings = section(str_off, str_len, "string")?;
    let mut out = Vec::new();
    let mut at = 0;
    while at < type_sec.len() {
        let (Some(name_off), Some(info), Some(size_type)) = (
            u32_at(type_sec, at),
            u32_at(type_sec, at + 4),
            u32_at(type_sec, at + 8),
        ) else {
            return Err(format!("BTF: type {} cut short", out.len() + 1));
        };
        let kind = (info >> 24) & 0x1f;
        let n = extra_len(kind, (info & 0xffff) as usize)?;
        let extra = type_sec
            .get(at + 12..at + 12 + n)
            .ok_or(format!("BTF: type {} cut short", out.len() + 1))?;
        out.push(Type {
            name_off,
            kind,
            kind_flag: info >> 31 != 0,
            size_type,
            extra,
        });
        at += 12 + n;
    }
    Ok((out, strings))
}

fn name(strings: &[u8], off: u32) -> &[u8] {
    let s = strings.get(off as usize..).unwrap_or_default();
    &s[..s.iter().position(|&c| c == 0).unwrap_or(s.len())]
}

/// Byte offset of `member` in `struct sname`, looking into anonymous struct and union members
/// (the kernel nests many fields so); an error if there is no such struct, the member is not
/// in it, or it is a bitfield.
pub fn member_offset(btf: &[u8], sname: &str, member: &str) -> Result<u32, String> {
    let (types, strings) = types(btf)?;
    let st = types
        .iter()
        .find(|t| t.kind == KIND_STRUCT && name(strings, t.name_off) == sname.as_bytes())
        .ok_or(format!("BTF: no struct {sname}"))?;
    let bits = find_member(&types, strings, st, member.as_bytes(), 0)?
        .ok_or(format!("BTF: struct {sname} has no member {member}"))?;
    if bits % 8 != 0 {
        return Err(format!("BTF: {sname}.{member} is not byte-aligned"));
    }
    Ok(bits / 8)
}

/// Bit offset of `member` in `t` (itself at `base` bits), depth-first through anonymous members.
fn find_member(
    types: &[Type],
    strings: &[u8],
    t: &Type,
    member: &[u8],
    base: u32,
) -> Result<Option<u32>, String> {
    for m in t.extra.chunks_exact(12) {
        let (m_name, m_type, m_off) = (
            u32_at(m, 0).unwrap_or(0),
            u32_at(m, 4).unwrap_or(0),
            u32_at(m, 8).unwrap_or(0),
        );
        // With kind_flag the offset holds the bitfield's size in its top 8 bits.
        let off = base
            + if t.kind_flag {
                m_off & 0xff_ffff
            } else {
                m_off
            };
        if m_name != 0 {
            if name(strings, m_name) == member {
                if t.kind_flag && m_off >> 24 != 0 {
                    return Err("BTF: the member is a bitfield".into());
                }
                return Ok(Some(off));
            }
            continue;
        }
        // An anonymous member: follow typedefs and qualifiers to its struct or union.
        let mut id = m_type;
        for _ in 0..16 {
            let Some(inner) = id.checked_sub(1).and_then(|i| types.get(i as usize)) else {
                break;
            };
            match inner.kind {
                KIND_STRUCT | KIND_UNION => {
                    if let Some(found) = find_member(types, strings, inner, member, off)? {
                        return Ok(Some(found));
                    }
                    break;
                }
                // TYPEDEF, VOLATILE, CONST, RESTRICT, TYPE_TAG.
                8 | 9 | 10 | 11 | 18 => id = inner.size_type,
                _ => break,
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-built BTF blob, laid out per btf.rst: `struct s` (16 bytes) with `int a` at byte
    /// 0 and at byte 8 an anonymous union of `int b` and an anonymous 8-byte struct holding
    /// `int c` at its byte 4; so c is at byte 12 of s.
    fn blob() -> Vec<u8> {
        let strings = b"\0int\0s\0a\0b\0c\0";
        let (s_int, s_s, s_a, s_b, s_c) = (1u32, 5u32, 7u32, 9u32, 11u32);
        let mut ty = Vec::new();
        let mut put = |v: u32| ty.extend_from_slice(&v.to_le_bytes());
        // 1: int, size 4, INT data (32 bits).
        put(s_int);
        put(1 << 24);
        put(4);
        put(32);
        // 2: the anonymous struct, size 8, one member: c at bit 32.
        put(0);
        put(4 << 24 | 1);
        put(8);
        put(s_c);
        put(1);
        put(32);
        // 3: union { int b; struct 2; } size 8.
        put(0);
        put(5 << 24 | 2);
        put(8);
        put(s_b);
        put(1);
        put(0);
        put(0);
        put(2);
        put(0);
        // 4: struct s { int a; union 3 at bit 64; } size 16.
        put(s_s);
        put(4 << 24 | 2);
        put(16);
        put(s_a);
        put(1);
        put(0);
        put(0);
        put(3);
        put(64);
        let mut b = Vec::new();
        b.extend_from_slice(&MAGIC.to_le_bytes());
        b.extend_from_slice(&[1, 0]);
        for v in [
            24u32,
            0,
            ty.len() as u32,
            ty.len() as u32,
            strings.len() as u32,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&ty);
        b.extend_from_slice(strings);
        b
    }

    #[test]
    fn finds_direct_and_nested_members() {
        let b = blob();
        assert_eq!(member_offset(&b, "s", "a"), Ok(0));
        // The union at byte 8, b at its start.
        assert_eq!(member_offset(&b, "s", "b"), Ok(8));
        // The union at 8, the anonymous struct at 0 of it, c at bit 32 of that: byte 12.
        assert_eq!(member_offset(&b, "s", "c"), Ok(12));
        assert!(
            member_offset(&b, "s", "d")
                .unwrap_err()
                .contains("no member d")
        );
        assert!(
            member_offset(&b, "t", "a")
                .unwrap_err()
                .contains("no struct t")
        );
    }

    #[test]
    fn rejects_what_is_not_btf() {
        assert!(
            member_offset(b"hello world", "s", "a")
                .unwrap_err()
                .contains("magic")
        );
        let mut b = blob();
        b.truncate(40);
        assert!(member_offset(&b, "s", "a").is_err());
    }

    /// The running kernel's `task_struct.tgid`, against what bpftool (another reader of the same
    /// BTF) prints for it: `bpftool btf dump file /sys/kernel/btf/vmlinux format raw`, the
    /// member line `'tgid' type_id=N bits_offset=B` under `STRUCT 'task_struct'`.
    #[test]
    fn task_struct_tgid_matches_bpftool() {
        let Ok(btf) = std::fs::read("/sys/kernel/btf/vmlinux") else {
            eprintln!("no /sys/kernel/btf/vmlinux: skipped");
            return;
        };
        let Ok(out) = std::process::Command::new("bpftool")
            .args([
                "btf",
                "dump",
                "file",
                "/sys/kernel/btf/vmlinux",
                "format",
                "raw",
            ])
            .output()
        else {
            // CI installs it (.ci/run) and says so with PGHOTD_REQUIRE_TOOLS=1, as the root
            // crate's tests do for their tools (tests/util `tool_present`).
            assert!(
                std::env::var_os("PGHOTD_REQUIRE_TOOLS").is_none_or(|v| v != "1"),
                "bpftool is not on PATH and PGHOTD_REQUIRE_TOOLS=1: install it (see .ci/run)"
            );
            eprintln!("\n*** SKIPPED: bpftool is not on PATH; this test did not run ***\n");
            return;
        };
        let text = String::from_utf8_lossy(&out.stdout);
        let mut in_task = false;
        let mut bits = None;
        for l in text.lines() {
            if l.starts_with('[') {
                in_task = l.contains("STRUCT 'task_struct' ");
            } else if in_task && l.trim_start().starts_with("'tgid' ") {
                let b = l.split("bits_offset=").nth(1).unwrap();
                bits = Some(b.trim().parse::<u32>().unwrap());
            }
        }
        let bits = bits.expect("bpftool shows task_struct.tgid");
        assert_eq!(member_offset(&btf, "task_struct", "tgid"), Ok(bits / 8));
    }
}
