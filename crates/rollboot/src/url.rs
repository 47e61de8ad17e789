//! What a value from outside may become in a URL rollboot sends.
//!
//! Owns the percent-encoding of a value put into one path segment ([`segment`]) or one query
//! value ([`query_value`]) of a URL rollboot builds itself (Alertmanager's silences and
//! alerts), the shape of the Kubernetes names rollboot reads back from its own records on a
//! Node before it asks the API about them ([`is_dns_label`], [`is_dns_subdomain`]: kube-rs
//! writes a namespace or a name into the request path as it is, unencoded, so a name that
//! cannot be an object's is never asked for), and how an operator's URL (a webhook's, a
//! notification sink's) is sent to ([`configured`]): as written, nothing put into it. It must
//! never decide what a value means, only whether and how it may travel; every place where a
//! value from outside meets a URL, a command or a file is listed in
//! `docs/security-inputs.md`.

/// `value` percent-encoded for one path segment: every byte but RFC 3986's unreserved ones
/// (letters, digits, `-`, `.`, `_`, `~`) as `%XX`, so `/`, `?`, `#`, `%` and spaces stay
/// inside the segment. `None` for the empty value, `.` and `..`, which no encoding keeps one
/// segment of their own (a server or proxy removes dot segments, percent-encoded ones too).
pub fn segment(value: &str) -> Option<String> {
    match value {
        "" | "." | ".." => None,
        v => Some(encode(v)),
    }
}

/// `value` percent-encoded for one query parameter's value: every byte but RFC 3986's
/// unreserved ones as `%XX`, so `&`, `=`, `#`, `+` and spaces stay inside the value.
pub fn query_value(value: &str) -> String {
    encode(value)
}

fn encode(value: &str) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// An operator's `http://` or `https://` URL (a webhook's, a notification sink's) as rollboot
/// sends to it: the client's base (`scheme://authority`) and the request's target (its path
/// and query exactly as written, `/` when it has none). Nothing is put into it: what rollboot
/// says goes in the body. `Err` says what is wrong without repeating the URL, which may be a
/// credential (a Slack webhook's).
pub fn configured(url: &str) -> Result<(String, String), String> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e: http::uri::InvalidUri| e.to_string())?;
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        return Err("no scheme or host".into());
    };
    if scheme != "http" && scheme != "https" {
        return Err(format!("scheme `{scheme}`"));
    }
    let target = uri.path_and_query().map_or("/", |p| p.as_str());
    Ok((format!("{scheme}://{authority}"), target.to_string()))
}

/// Whether `s` is an RFC 1123 DNS label, as a namespace's name is: 1 to 63 lowercase letters,
/// digits and `-`, a letter or digit at both ends.
pub fn is_dns_label(s: &str) -> bool {
    s.len() <= 63 && label_shaped(s)
}

/// Whether `s` is a DNS subdomain as Kubernetes checks the name of most objects (a Lease, a
/// pod, a PodDisruptionBudget, a ReplicaSet, a VolumeAttachment): parts of lowercase letters,
/// digits and `-`, a letter or digit at both ends, joined by `.`, at most 253 characters in
/// all (Kubernetes bounds no part on its own: a VolumeAttachment's `csi-<sha256>` is 68).
/// Never `.` or `..`, and never holds `/`, `?`, `#`, `%` or a space.
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(label_shaped)
}

/// Lowercase letters, digits and `-`, at least one, a letter or digit at both ends.
fn label_shaped(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The values that once left their place in a URL, and what they become.
    const HOSTILE: [(&str, &str); 7] = [
        ("../../../admin?x=1", "..%2F..%2F..%2Fadmin%3Fx%3D1"),
        ("a/b", "a%2Fb"),
        ("a?b", "a%3Fb"),
        ("a#b", "a%23b"),
        ("100%", "100%25"),
        ("a b", "a%20b"),
        ("é&=+", "%C3%A9%26%3D%2B"),
    ];

    #[test]
    fn a_hostile_value_stays_inside_its_path_segment() {
        for (value, want) in HOSTILE {
            let s = segment(value).unwrap();
            assert_eq!(s, want, "{value}");
            assert!(!s.contains(['/', '?', '#', ' ']), "{value} -> {s}");
        }
        assert_eq!(
            segment("0b7c6f1e-aaaa-4bbb-8ccc-000000000001").unwrap(),
            "0b7c6f1e-aaaa-4bbb-8ccc-000000000001"
        );
        for dots in ["", ".", ".."] {
            assert_eq!(segment(dots), None, "{dots:?}");
        }
        // `..` inside a longer value is no dot segment.
        assert_eq!(segment("..a").unwrap(), "..a");
    }

    #[test]
    fn a_hostile_value_stays_inside_its_query_value() {
        for (value, want) in HOSTILE {
            let q = query_value(value);
            assert_eq!(q, want, "{value}");
            assert!(
                !q.contains(['&', '=', '#', '?', ' ', '/']),
                "{value} -> {q}"
            );
        }
        assert_eq!(query_value(".."), "..");
    }

    #[test]
    fn an_operator_s_url_is_sent_to_as_written() {
        let (base, target) =
            configured("https://hooks.example.com:8443/a%2Fb/c?token=x%26y&z=%20..").unwrap();
        assert_eq!(base, "https://hooks.example.com:8443");
        assert_eq!(target, "/a%2Fb/c?token=x%26y&z=%20..");
        assert_eq!(configured("http://h.example").unwrap().1, "/");
        assert_eq!(
            configured("http://h.example/p?q=1#frag").unwrap().1,
            "/p?q=1"
        );
        for bad in ["ftp://h.example/x", "/just/a/path", "http://", "not a url"] {
            let e = configured(bad).unwrap_err();
            assert!(!e.contains(bad), "{e}");
        }
    }

    #[test]
    fn dns_names_hold_nothing_a_path_would_read() {
        for ok in ["default", "kube-system", "a1"] {
            assert!(is_dns_label(ok) && is_dns_subdomain(ok), "{ok}");
        }
        assert!(is_dns_subdomain("csi-0a1b.example.com"));
        assert!(is_dns_subdomain(&format!("csi-{}", "e6".repeat(32))));
        assert!(!is_dns_label("a.b"));
        for bad in [
            "", ".", "..", "-a", "a-", "A", "a/b", "a?b", "a#b", "a%2F", "a b", "../x",
        ] {
            assert!(!is_dns_subdomain(bad), "{bad:?}");
            assert!(!is_dns_label(bad), "{bad:?}");
        }
        assert!(!is_dns_label(&"a".repeat(64)));
        assert!(!is_dns_subdomain(&"a".repeat(254)));
        assert!(is_dns_subdomain(&["a"; 127].join(".")));
        assert!(!is_dns_subdomain(&["a"; 128].join(".")));
    }

    proptest::proptest! {
        /// Whatever the value, its encoding is unreserved bytes and `%XX` only, and decodes
        /// back to it.
        #[test]
        fn any_value_round_trips_through_its_encoding(value in ".*") {
            let q = query_value(&value);
            proptest::prop_assert!(q.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~%".contains(&b)));
            let mut bytes = Vec::new();
            let mut it = q.bytes();
            while let Some(b) = it.next() {
                if b == b'%' {
                    let hex = [it.next().unwrap(), it.next().unwrap()];
                    bytes.push(u8::from_str_radix(std::str::from_utf8(&hex).unwrap(), 16).unwrap());
                } else {
                    bytes.push(b);
                }
            }
            proptest::prop_assert_eq!(String::from_utf8(bytes).unwrap(), value);
        }
    }
}
