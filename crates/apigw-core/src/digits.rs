//! Numbers and IPv4 addresses written into byte buffers without `fmt`, for the per-request
//! hot paths: the proxy's `X-Forwarded-For` and the access log's client address.

/// Writes `ip` in dotted decimal, as its `Display` does, at the start of `out` (15 bytes are
/// always enough); returns the bytes written.
pub fn dotted(out: &mut [u8], ip: std::net::Ipv4Addr) -> usize {
    let mut at = 0;
    for (i, octet) in ip.octets().into_iter().enumerate() {
        if i > 0 {
            out[at] = b'.';
            at += 1;
        }
        at += decimal(&mut out[at..], octet.into());
    }
    at
}

/// Writes `n` in decimal at the start of `out`; returns the digits written.
pub fn decimal(out: &mut [u8], mut n: u16) -> usize {
    let width = n.checked_ilog10().map_or(1, |d| d as usize + 1);
    for d in out[..width].iter_mut().rev() {
        *d = b'0' + (n % 10) as u8;
        n /= 10;
    }
    width
}
