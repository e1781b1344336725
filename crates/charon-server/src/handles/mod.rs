//! The handles through which tasks reach each other, in one place: a queue actor's
//! ([`QueueHandle`], the commands it takes), a connection's ([`ConnHandle`], the events it takes)
//! the delivery credit between them ([`ConnFlow`], [`ChannelLimit`]) and page-out
//! backpressure on publishers ([`PageFlow`]).
//!
//! They refer to each other (a consumer target names its connection and channel gate; credit
//! remembers the queues waiting for it), so they live together; everything else imports them
//! from here and they import nothing else of the server (but the lock helper, `crate::locks`).

mod confirms;
mod conn;
mod flow;
mod page_flow;
mod queue;

pub use confirms::{ConfirmAnswers, ConfirmBatch};
pub use conn::{ConnEvent, ConnHandle, Control};
pub use flow::{ChannelLimit, ConnFlow, MAX_PENDING_DELIVERIES};
pub use page_flow::{PageFlow, lowered, still_raised};
pub use queue::{
    ConfirmTo, ConsumerTarget, Placed, QueueCmd, QueueHandle, QueueStats, Stored, TakeRoute,
    TakeRouteFn, Taken, inbox_bytes_of,
};
