//! What the targets share: reading a request head from the fuzzer's bytes the way the server
//! would receive it.
#![allow(dead_code)]

use http::{HeaderName, HeaderValue, Method, Request, Uri, Version};

/// A request head as text: `METHOD TARGET HTTP/1.x`, then `Name: value` lines, as hyper reads
/// HTTP/1 (with `httparse`, which hyper uses). An input starting with `H2\n` is HTTP/2
/// instead: the request line is `METHOD PATH`, and a `:authority: x` line gives the
/// authority, as the h2 crate hands hyper its pseudo-headers. None when the server would
/// refuse the bytes before any gateway code sees them.
pub fn request(data: &[u8]) -> Option<Request<()>> {
    match data.strip_prefix(b"H2\n") {
        Some(rest) => h2_request(rest),
        None => h1_request(data),
    }
}

fn h1_request(data: &[u8]) -> Option<Request<()>> {
    // A head without its blank line is read as if it had one.
    let mut owned = data.to_vec();
    if !data.windows(4).any(|w| w == b"\r\n\r\n") && !data.windows(2).any(|w| w == b"\n\n") {
        owned.extend_from_slice(b"\r\n\r\n");
    }
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut parsed = httparse::Request::new(&mut headers);
    if parsed.parse(&owned).ok()?.is_partial() {
        return None;
    }
    let version = match parsed.version? {
        0 => Version::HTTP_10,
        _ => Version::HTTP_11,
    };
    let method = Method::from_bytes(parsed.method?.as_bytes()).ok()?;
    let uri: Uri = parsed.path?.parse().ok()?;
    let mut req = Request::builder().method(method).uri(uri).version(version);
    for h in parsed.headers.iter() {
        let name = HeaderName::from_bytes(h.name.as_bytes()).ok()?;
        let value = HeaderValue::from_bytes(h.value).ok()?;
        req = req.header(name, value);
    }
    req.body(()).ok()
}

fn h2_request(data: &[u8]) -> Option<Request<()>> {
    let text = std::str::from_utf8(data).ok()?;
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let (method, path) = lines.next()?.split_once(' ')?;
    let method = Method::from_bytes(method.as_bytes()).ok()?;
    let mut authority = None;
    let mut fields = Vec::new();
    for line in lines.filter(|l| !l.is_empty()) {
        if let Some(a) = line.strip_prefix(":authority:") {
            authority = Some(a.trim());
            continue;
        }
        let (name, value) = line.split_once(':')?;
        // HTTP/2 field names are lowercase on the wire; h2 refuses others.
        if name.bytes().any(|b| b.is_ascii_uppercase()) {
            return None;
        }
        fields.push((
            HeaderName::from_bytes(name.as_bytes()).ok()?,
            HeaderValue::from_str(value.trim()).ok()?,
        ));
    }
    let mut uri = Uri::builder().path_and_query(path);
    if let Some(a) = authority {
        uri = uri.scheme("https").authority(a);
    }
    let mut req = Request::builder()
        .method(method)
        .uri(uri.build().ok()?)
        .version(Version::HTTP_2);
    for (name, value) in fields {
        req = req.header(name, value);
    }
    req.body(()).ok()
}

/// Makes a stack overflow a crash libFuzzer reports, with its input saved, rather than a
/// silent SIGSEGV. Call from `fuzz_target!`'s `init`, which runs before libFuzzer installs
/// its signal handlers: a SIGSEGV handler that runs on an alternate stack is installed first,
/// so libFuzzer keeps `SA_ONSTACK` for its own and chains to this one, which aborts; libFuzzer
/// catches the abort and writes the crashing input. (Without a sanitizer nothing else gives the
/// handler a stack to run on once the target's is exhausted.)
pub fn report_stack_overflows() {
    const ALT_STACK: usize = 256 * 1024;
    extern "C" fn on_segv(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
        const MSG: &[u8] = b"SIGSEGV (a stack overflow, when the stack is exhausted): aborting\n";
        // SAFETY: write(2) and abort(3) are async-signal-safe.
        unsafe {
            libc::write(2, MSG.as_ptr().cast(), MSG.len());
            libc::abort();
        }
    }
    let stack = Box::leak(vec![0u8; ALT_STACK].into_boxed_slice());
    // SAFETY: the alternate stack is leaked, so it outlives the thread; the handler only calls
    // async-signal-safe functions.
    unsafe {
        let ss = libc::stack_t {
            ss_sp: stack.as_mut_ptr().cast(),
            ss_flags: 0,
            ss_size: ALT_STACK,
        };
        libc::sigaltstack(&ss, std::ptr::null_mut());
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_segv as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGSEGV, &action, std::ptr::null_mut());
    }
}
