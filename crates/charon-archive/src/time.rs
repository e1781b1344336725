//! Times: milliseconds since the Unix epoch in SQL, RFC 3339 (UTC) in JSON.

/// Now, in milliseconds since the epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Days since 1970-01-01 → (year, month, day) (H. Hinnant's civil_from_days).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// (year, month, day) → days since 1970-01-01.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `ms` as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn format_ms(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let rest = ms.rem_euclid(86_400_000);
    let (y, mo, d) = civil(days);
    let (h, mi, s, milli) = (
        rest / 3_600_000,
        rest / 60_000 % 60,
        rest / 1000 % 60,
        rest % 1000,
    );
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{milli:03}Z")
}

/// Milliseconds from an integer, or from RFC 3339 (`2026-11-25T20:00:00Z`,
/// fractional seconds and `+HH:MM` offsets allowed, or a date alone).
pub fn parse_time(s: &str) -> Option<i64> {
    let s = s.trim();
    if let Ok(ms) = s.parse::<i64>() {
        return Some(ms);
    }
    let num = |t: &str| t.parse::<i64>().ok();
    let date = s.get(0..10)?;
    let y = num(date.get(0..4)?)?;
    let mo = u32::try_from(num(date.get(5..7)?)?).ok()?;
    let d = u32::try_from(num(date.get(8..10)?)?).ok()?;
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) {
        return None;
    }
    let mut ms = days_from_civil(y, mo, d) * 86_400_000;
    let rest = &s[10..];
    if rest.is_empty() {
        return Some(ms);
    }
    let rest = rest.strip_prefix(['T', 't', ' '])?;
    let h = num(rest.get(0..2)?)?;
    let mi = num(rest.get(3..5)?)?;
    let sec = num(rest.get(6..8)?)?;
    ms += ((h * 60 + mi) * 60 + sec) * 1000;
    let mut tail = &rest[8..];
    if let Some(frac) = tail.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        let f = &frac[..digits];
        let millis = format!("{:0<3}", &f[..f.len().min(3)]);
        ms += num(&millis)?;
        tail = &frac[digits..];
    }
    match tail {
        "" | "Z" | "z" => Some(ms),
        off => {
            let sign = match off.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let oh = num(off.get(1..3)?)?;
            let om = num(off.get(4..6)?)?;
            Some(ms - sign * (oh * 60 + om) * 60_000)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let t = 1_795_636_862_345; // 2026-11-25T...
        assert_eq!(parse_time(&format_ms(t)), Some(t));
        assert_eq!(format_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            parse_time("2000-02-29T12:00:00+01:00"),
            Some(951_822_000_000)
        );
        assert_eq!(parse_time("2000-02-29"), Some(951_782_400_000));
        assert_eq!(parse_time("nope"), None);
    }
}
