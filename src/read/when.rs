//! Times for people: entry timestamps shown in a time zone, durations in a
//! few characters, and `--since`/`--until` read the way `git log` users
//! write them. Pure: the time zone and "now" are arguments.

use jiff::civil::{Date, DateTime};
use jiff::tz::TimeZone;
use jiff::{Timestamp, Zoned};

/// An entry's `ts` (nanoseconds since the epoch) in `tz`; `None` past what a
/// calendar can show.
pub fn zoned(ts: u64, tz: &TimeZone) -> Option<Zoned> {
    Timestamp::from_nanosecond(i128::from(ts))
        .ok()
        .map(|t| t.to_zoned(tz.clone()))
}

/// `2026-11-30 14:02:11`
pub fn date_time(ts: u64, tz: &TimeZone) -> String {
    zoned(ts, tz).map_or_else(
        || format!("@{ts}"),
        |z| z.strftime("%Y-%m-%d %H:%M:%S").to_string(),
    )
}

/// `2026-11-30 14:02`
pub fn date_minute(ts: u64, tz: &TimeZone) -> String {
    zoned(ts, tz).map_or_else(
        || format!("@{ts}"),
        |z| z.strftime("%Y-%m-%d %H:%M").to_string(),
    )
}

/// `14:02:11`
pub fn time(ts: u64, tz: &TimeZone) -> String {
    zoned(ts, tz).map_or_else(|| format!("@{ts}"), |z| z.strftime("%H:%M:%S").to_string())
}

/// `2026-11-30`
pub fn date(ts: u64, tz: &TimeZone) -> String {
    zoned(ts, tz).map_or_else(|| format!("@{ts}"), |z| z.strftime("%Y-%m-%d").to_string())
}

/// The zone's name and offset at `ts`, e.g. `Europe/Paris +01:00`.
pub fn zone_label(ts: u64, tz: &TimeZone) -> String {
    match zoned(ts, tz) {
        Some(z) => {
            let name = tz.iana_name().unwrap_or("local time");
            format!("{name} {}", z.strftime("%:z"))
        }
        None => "local time".into(),
    }
}

/// RFC 3339 in UTC, to the nanosecond: what scripts get in `--json`.
pub fn rfc3339(ts: u64) -> String {
    Timestamp::from_nanosecond(i128::from(ts)).map_or_else(|_| String::new(), |t| t.to_string())
}

/// A duration in a few characters: `850 ms`, `12.3 s`, `4m 05s`, `2h 03m`,
/// `3d 04h`.
pub fn duration(ns: u64) -> String {
    let ms = ns / 1_000_000;
    let s = ns / 1_000_000_000;
    if ms < 1000 {
        format!("{ms} ms")
    } else if s < 60 {
        format!("{:.1} s", ns as f64 / 1e9)
    } else if s < 3600 {
        format!("{}m {:02}s", s / 60, s % 60)
    } else if s < 86_400 {
        format!("{}h {:02}m", s / 3600, (s % 3600) / 60)
    } else {
        format!("{}d {:02}h", s / 86_400, (s % 86_400) / 3600)
    }
}

/// Reads `--since`/`--until`: `now`, `today`, `yesterday`; `30m`, `2h`,
/// `3d`, `2w` (that long ago, `ago` optional); a date (`2026-11-30`,
/// midnight in `tz`), a date and time (`2026-11-30 14:00[:05]`, in `tz`),
/// or an RFC 3339 time with its offset. Returns nanoseconds since the epoch.
pub fn parse(text: &str, now: Timestamp, tz: &TimeZone) -> Result<u64, String> {
    let t = text.trim();
    let bad = || {
        format!(
            "cannot read {text:?} as a time: use a date (2026-11-30), a date and time \
             (2026-11-30 14:00), a time ago (30m, 2h, 3d, 2w) or today/yesterday"
        )
    };
    let midnight = |d: Date| -> Result<Timestamp, String> {
        tz.to_timestamp(d.to_datetime(jiff::civil::Time::midnight()))
            .map_err(|e| e.to_string())
    };
    let today = now.to_zoned(tz.clone()).date();
    let at: Timestamp = match t {
        "now" => now,
        "today" => midnight(today)?,
        "yesterday" => midnight(today.yesterday().map_err(|e| e.to_string())?)?,
        _ => {
            if let Some(ago) = ago(t) {
                let back = i128::from(ago).checked_mul(1_000_000_000).ok_or_else(bad)?;
                Timestamp::from_nanosecond(now.as_nanosecond() - back).map_err(|_| bad())?
            } else if let Ok(ts) = t.parse::<Timestamp>() {
                ts
            } else if let Ok(d) = t.parse::<Date>()
                && !t.contains([' ', 'T'])
            {
                midnight(d)?
            } else if let Ok(dt) = t.replacen(' ', "T", 1).parse::<DateTime>() {
                tz.to_timestamp(dt).map_err(|e| e.to_string())?
            } else {
                return Err(bad());
            }
        }
    };
    u64::try_from(at.as_nanosecond())
        .map_err(|_| format!("{text:?} is outside 1970 to 2554, the times a log can hold"))
}

/// `30m`, `2h ago`, `3 days`: seconds.
fn ago(text: &str) -> Option<u64> {
    let t = text.strip_suffix("ago").unwrap_or(text).trim();
    let split = t.find(|c: char| !c.is_ascii_digit())?;
    let (n, unit) = t.split_at(split);
    let n: u64 = n.parse().ok()?;
    let unit = match unit.trim() {
        "s" | "sec" | "secs" | "second" | "seconds" => 1,
        "m" | "min" | "mins" | "minute" | "minutes" => 60,
        "h" | "hour" | "hours" => 3600,
        "d" | "day" | "days" => 86_400,
        "w" | "week" | "weeks" => 7 * 86_400,
        _ => return None,
    };
    n.checked_mul(unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paris() -> TimeZone {
        TimeZone::get("Europe/Paris").unwrap_or_else(|_| TimeZone::fixed(jiff::tz::offset(1)))
    }

    const NOW: i64 = 1_795_000_000; // 2026-11-18T11:06:40Z

    fn now() -> Timestamp {
        Timestamp::from_second(NOW).expect("in range")
    }

    #[test]
    fn times_are_shown_in_the_zone() {
        let ts = NOW as u64 * 1_000_000_000;
        assert_eq!(date_time(ts, &TimeZone::UTC), "2026-11-18 11:06:40");
        assert_eq!(time(ts, &paris()), "12:06:40");
        assert_eq!(rfc3339(ts), "2026-11-18T11:06:40Z");
    }

    #[test]
    fn durations_are_short() {
        assert_eq!(duration(283_000_000), "283 ms");
        assert_eq!(duration(12_340_000_000), "12.3 s");
        assert_eq!(duration(245_000_000_000), "4m 05s");
        assert_eq!(duration(7_380_000_000_000), "2h 03m");
        assert_eq!(duration(273_600_000_000_000), "3d 04h");
    }

    #[test]
    fn since_and_until_read_dates_times_and_ago() {
        let tz = TimeZone::UTC;
        let s = |t: &str| parse(t, now(), &tz);
        let ns = |sec: i64| (sec as u64) * 1_000_000_000;
        assert_eq!(s("now"), Ok(ns(NOW)));
        assert_eq!(s("2h"), Ok(ns(NOW - 7200)));
        assert_eq!(s("2 hours ago"), Ok(ns(NOW - 7200)));
        assert_eq!(s("1w"), Ok(ns(NOW - 604_800)));
        assert_eq!(s("2026-11-18"), Ok(ns(NOW - (11 * 3600 + 6 * 60 + 40))));
        assert_eq!(s("today"), s("2026-11-18"));
        assert_eq!(s("yesterday"), s("2026-11-17"));
        assert_eq!(s("2026-11-18 11:06:40"), Ok(ns(NOW)));
        assert_eq!(s("2026-11-18T12:06:40+01:00"), Ok(ns(NOW)));
        assert_eq!(parse("2026-11-18 12:06:40", now(), &paris()), Ok(ns(NOW)));
        for bad in ["", "soon", "3 fortnights", "2026-13-01", "1960-01-01"] {
            assert!(s(bad).is_err(), "{bad}");
        }
    }
}
