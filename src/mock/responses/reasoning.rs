//! The mock's `encrypted_content` for reasoning items: a seal that names the mock that made it.
//!
//! OpenAI's encrypted reasoning is opaque and only the vendor that made it can read it back: it
//! answers 400 `invalid_encrypted_content` to any other. The mock does the same with a readable
//! seal, `switchyard-mock:<mock name>:<item id>:<check>`, so a gateway test can prove that
//! reasoning went back only to the provider that produced it: a mock accepts its own seals and
//! refuses those of a mock with another name, and any seal that was cut or edited (the check is
//! a hash of the name and the item id).

/// What every seal starts with.
const PREFIX: &str = "switchyard-mock:";

/// The `encrypted_content` mock `name` gives reasoning item `item_id`.
pub(super) fn seal(name: &str, item_id: &str) -> String {
    format!("{PREFIX}{name}:{item_id}:{:016x}", check(name, item_id))
}

/// Whether `content` is a seal made by mock `name`.
pub(super) fn made_by(name: &str, content: &str) -> bool {
    let Some(rest) = content.strip_prefix(PREFIX) else {
        return false;
    };
    let Some((rest, tag)) = rest.rsplit_once(':') else {
        return false;
    };
    let Some((sealer, item_id)) = rest.rsplit_once(':') else {
        return false;
    };
    sealer == name && tag == format!("{:016x}", check(sealer, item_id))
}

/// FNV-1a over the name, a separator and the item id: enough to notice a cut or an edit.
fn check(name: &str, item_id: &str) -> u64 {
    let bytes = name.bytes().chain([0]).chain(item_id.bytes());
    bytes.fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mock_knows_its_own_seal_only() {
        let sealed = seal("mock0", "rs_mock_3");
        assert!(
            sealed.starts_with("switchyard-mock:mock0:rs_mock_3:"),
            "{sealed}"
        );
        assert!(made_by("mock0", &sealed));
        assert!(!made_by("mock1", &sealed));
        assert!(!made_by("mock0", &sealed[..sealed.len() - 1]));
        assert!(!made_by("mock0", &sealed.replace("rs_mock_3", "rs_mock_4")));
        assert!(!made_by("mock0", "gAAAAABo-real-openai=="));
        let odd = seal("a:b", "rs_mock_1");
        assert!(made_by("a:b", &odd));
        assert!(!made_by("a", &odd));
    }
}
