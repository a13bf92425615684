//! Keys for client IP addresses: IPv4 by address, IPv6 by network prefix (/56 by default),
//! since one IPv6 client is normally given a whole /64 or more (home connections commonly a
//! /56, RIPE-690) and can rotate through it at will.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::decision::ConfigError;

/// A client network: an IPv4 address or an IPv6 prefix, masked as [`IpKeyer`] says. 16 bytes,
/// aligned to 8 (two words), so a keyed limiter's entry stays small.
///
/// ```
/// use floodgate::{IpKey, IpKeyer};
/// let keyer = IpKeyer::new();
/// let a = keyer.key("2001:db8:1:2:aaaa::1".parse()?);
/// let b = keyer.key("2001:db8:1:3f:bbbb::9".parse()?);
/// assert_eq!(a, b); // same /56
/// assert_eq!(a.to_string(), "2001:db8:1::");
/// assert_eq!(std::mem::size_of::<IpKey>(), 16);
/// # Ok::<(), std::net::AddrParseError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IpKey {
    /// The masked address as an IPv6 address (IPv4 as `::ffff:a.b.c.d`), high and low halves.
    high: u64,
    low: u64,
}

impl IpKey {
    /// The network address (the client's address with the host bits cleared).
    ///
    /// ```
    /// use floodgate::IpKeyer;
    /// let key = IpKeyer::new().key("192.0.2.7".parse()?);
    /// assert_eq!(key.network(), "192.0.2.7".parse::<std::net::IpAddr>()?);
    /// # Ok::<(), std::net::AddrParseError>(())
    /// ```
    pub fn network(&self) -> IpAddr {
        let bits = (u128::from(self.high) << 64) | u128::from(self.low);
        Ipv6Addr::from(bits).to_canonical()
    }
}

/// The two halves as they are: a key of a keyed map is held in a
/// [`PairCell`](super::PairCell), so a slot of a `Keyed<IpKey, Gcra>` is 24 bytes.
impl super::PairKey for IpKey {
    #[inline(always)]
    fn to_pair(self) -> [u64; 2] {
        [self.high, self.low]
    }
    #[inline(always)]
    fn from_pair(pair: [u64; 2]) -> Self {
        let [high, low] = pair;
        IpKey { high, low }
    }
}

impl super::Key for IpKey {
    type Cell = super::PairCell<Self>;
}

impl fmt::Display for IpKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.network().fmt(f)
    }
}

/// Turns client addresses into [`IpKey`]s. IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`, what a
/// dual-stack socket reports for IPv4 clients) count as IPv4.
///
/// ```
/// use floodgate::{IpKeyer, Keyed, ManualClock, TokenBucket, Rate};
/// let keyer = IpKeyer::new().with_ipv6_prefix(56)?; // group IPv6 clients by /56
/// let per_ip: Keyed<floodgate::IpKey, _, _> =
///     Keyed::builder(TokenBucket::new(Rate::per_second(1), 1)?)
///         .clock(ManualClock::new())
///         .build()?;
/// assert!(per_ip.try_acquire(&keyer.key("2001:db8:0:1::1".parse()?), 1)?.is_allowed());
/// assert!(!per_ip.try_acquire(&keyer.key("2001:db8:0:2::1".parse()?), 1)?.is_allowed()); // same /56
/// assert!(per_ip.try_acquire(&keyer.key("198.51.100.1".parse()?), 1)?.is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpKeyer {
    ipv4_prefix: u8,
    ipv6_prefix: u8,
}

impl Default for IpKeyer {
    fn default() -> Self {
        Self::new()
    }
}

impl IpKeyer {
    /// IPv4 by address (/32), IPv6 by /56.
    ///
    /// ```
    /// let keyer = floodgate::IpKeyer::new();
    /// assert_ne!(keyer.key("10.0.0.1".parse()?), keyer.key("10.0.0.2".parse()?)); // /32
    /// assert_eq!(keyer.key("2001:db8::1".parse()?), keyer.key("2001:db8:0:ff::2".parse()?)); // same /56
    /// assert_ne!(keyer.key("2001:db8::1".parse()?), keyer.key("2001:db8:0:100::1".parse()?));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub const fn new() -> Self {
        IpKeyer {
            ipv4_prefix: 32,
            ipv6_prefix: 56,
        }
    }

    /// Groups IPv6 clients by their first `prefix` bits.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for a prefix above 128.
    ///
    /// ```
    /// let keyer = floodgate::IpKeyer::new().with_ipv6_prefix(48)?;
    /// assert_eq!(keyer.key("2001:db8:1:2::1".parse()?), keyer.key("2001:db8:1:3::1".parse()?));
    /// assert!(floodgate::IpKeyer::new().with_ipv6_prefix(129).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_ipv6_prefix(self, prefix: u8) -> Result<Self, ConfigError> {
        if prefix > 128 {
            return Err(ConfigError::Invalid {
                what: "IPv6 prefix",
                why: "must be at most 128 bits",
            });
        }
        Ok(IpKeyer {
            ipv6_prefix: prefix,
            ..self
        })
    }

    /// Groups IPv4 clients by their first `prefix` bits (32, the default, keys each address).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for a prefix above 32.
    ///
    /// ```
    /// let keyer = floodgate::IpKeyer::new().with_ipv4_prefix(24)?;
    /// assert_eq!(keyer.key("10.1.2.3".parse()?), keyer.key("10.1.2.200".parse()?));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_ipv4_prefix(self, prefix: u8) -> Result<Self, ConfigError> {
        if prefix > 32 {
            return Err(ConfigError::Invalid {
                what: "IPv4 prefix",
                why: "must be at most 32 bits",
            });
        }
        Ok(IpKeyer {
            ipv4_prefix: prefix,
            ..self
        })
    }

    /// The key for a client address.
    ///
    /// ```
    /// let keyer = floodgate::IpKeyer::new();
    /// // An IPv4-mapped IPv6 address is keyed as the IPv4 address it carries.
    /// assert_eq!(keyer.key("::ffff:192.0.2.7".parse()?), keyer.key("192.0.2.7".parse()?));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn key(&self, ip: IpAddr) -> IpKey {
        match ip {
            IpAddr::V4(v4) => self.key_v4(v4),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => self.key_v4(v4),
                None => {
                    let bits = mask(u128::from(v6), self.ipv6_prefix, 128);
                    IpKey {
                        high: (bits >> 64) as u64,
                        low: bits as u64,
                    }
                }
            },
        }
    }

    fn key_v4(&self, v4: Ipv4Addr) -> IpKey {
        let bits = mask(u128::from(u32::from(v4)), self.ipv4_prefix, 32);
        IpKey {
            high: 0,
            // The ::ffff:0:0/96 block: no IPv6 key lands there (such addresses are IPv4 here).
            low: 0xffff_0000_0000 | bits as u64,
        }
    }
}

/// Keeps the first `prefix` of the `width` low bits of `bits`.
fn mask(bits: u128, prefix: u8, width: u32) -> u128 {
    let host_bits = width - u32::from(prefix);
    if host_bits >= 128 {
        0
    } else {
        bits & !((1u128 << host_bits) - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ipv6_is_keyed_by_prefix_and_ipv4_by_address() {
        let keyer = IpKeyer::new();
        assert_eq!(
            keyer.key(ip("2001:db8::1")),
            keyer.key(ip("2001:db8::ffff:1"))
        );
        assert_eq!(
            keyer.key(ip("2001:db8::1")),
            keyer.key(ip("2001:db8:0:ff::1"))
        );
        assert_ne!(
            keyer.key(ip("2001:db8::1")),
            keyer.key(ip("2001:db8:0:100::1"))
        );
        assert_ne!(keyer.key(ip("192.0.2.1")), keyer.key(ip("192.0.2.2")));
        assert_eq!(
            keyer.key(ip("::ffff:192.0.2.1")),
            keyer.key(ip("192.0.2.1"))
        );
        assert_eq!(keyer.key(ip("::ffff:192.0.2.1")).to_string(), "192.0.2.1");
    }

    #[test]
    fn extreme_prefixes() {
        let all = IpKeyer::new()
            .with_ipv6_prefix(0)
            .unwrap()
            .with_ipv4_prefix(0)
            .unwrap();
        assert_eq!(all.key(ip("2001:db8::1")), all.key(ip("fe80::1")));
        assert_eq!(all.key(ip("1.2.3.4")), all.key(ip("200.2.3.4")));
        assert_ne!(all.key(ip("1.2.3.4")), all.key(ip("fe80::1")));
        let exact = IpKeyer::new().with_ipv6_prefix(128).unwrap();
        assert_ne!(exact.key(ip("2001:db8::1")), exact.key(ip("2001:db8::2")));
        assert!(IpKeyer::new().with_ipv6_prefix(129).is_err());
        assert!(IpKeyer::new().with_ipv4_prefix(33).is_err());
    }
}
