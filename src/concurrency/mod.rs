//! Concurrency limits: how many requests are *in progress* at once, rather than how many start
//! per unit of time.
//!
//! * [`InFlight`]: at most `limit` permits held at once, in one atomic word; [`Permit`]s give
//!   themselves back when dropped; non-blocking, blocking and async acquire, the waiting ones in
//!   a fair FIFO queue.
//! * [`KeyedInFlight`]: the same limit per key ("20 requests in progress per API key"), in
//!   floodgate's bounded key map; a [`KeyedPermit`] gives back to its key.
//! * [`adaptive`]: an in-flight limit moved by AIMD, Gradient2 or Vegas from each request's
//!   latency and drops.
//!
//! ```
//! use floodgate::concurrency::InFlight;
//! let db_connections = InFlight::new(20)?;
//! match db_connections.try_acquire(1)? {
//!     Some(_permit) => { /* run the query; the permit is given back at the end of scope */ }
//!     None => { /* shed load: 503 */ }
//! }
//! assert_eq!(db_connections.in_flight(), 0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod acquire;
pub mod adaptive;
mod in_flight;
mod keyed;
mod queue;
mod word;

pub use acquire::Acquire;
pub use in_flight::{InFlight, InFlightPermit, OwnedInFlightPermit, Permit};
pub use keyed::{KEYED_SWEEP_BACKOFF_NANOS, KeyedInFlight, KeyedPermit};
pub use word::MAX_IN_FLIGHT_LIMIT;
