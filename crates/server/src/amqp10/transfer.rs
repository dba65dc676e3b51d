//! Incoming transfers: the session's window and the link's credit are enforced, a delivery
//! split over several transfers is assembled, and a whole one goes to the management node or
//! is published (`publish.rs`).
//!
//! Flow control is enforced, not advisory (transport §2.5.6, §2.6.7): a transfer past the
//! session's incoming window ends the session, one past the link's credit detaches the link.
//! Alarms withhold credit, so they hold for AMQP 1.0 publishers.

use bytes::{Bytes, BytesMut};
use warren_proto::amqp10::{condition, AmqpError, DeliveryState, Transfer};

use super::connection::{Connection, Fault};
use super::link::{Assembly, IncomingLink, Link, LinkTarget};
use super::management::Request;
use super::session::Session;

/// A whole delivery from an incoming link.
pub struct Delivered {
    pub delivery_id: u32,
    /// Pre-settled: the client hears nothing of its fate.
    pub settled: bool,
    /// The message, its transfers' payloads joined.
    pub raw: Bytes,
    /// Where the link's messages go.
    pub target: LinkTarget,
}

impl Connection {
    pub(super) fn on_transfer(
        &mut self,
        channel: u16,
        transfer: Transfer,
        payload: Bytes,
    ) -> Result<(), Fault> {
        let max_size = self.shared.config.max_message_size;
        let session = self.session(channel)?;
        take_incoming_window(session, channel)?;
        let handle = transfer.handle;
        let Some(link) = incoming_link(session, channel, handle)? else {
            return Ok(());
        };
        let Some(delivered) = assemble(link, channel, &transfer, payload, max_size)? else {
            return Ok(());
        };
        if matches!(delivered.target, LinkTarget::Management) {
            let (delivery_id, settled) = (delivered.delivery_id, delivered.settled);
            self.request_management(Request {
                channel,
                raw: delivered.raw,
            });
            self.outcome(channel, delivery_id, settled, DeliveryState::Accepted);
            return Ok(());
        }
        self.publish(channel, handle, delivered)
    }
}

/// Counts a transfer against the session's incoming window; past it, the session ends.
fn take_incoming_window(session: &mut Session, channel: u16) -> Result<(), Fault> {
    if session.incoming_window == 0 {
        return Err(Fault::End(
            channel,
            AmqpError::new(
                condition::WINDOW_VIOLATION,
                "transfer beyond the session's incoming window",
            ),
        ));
    }
    session.incoming_window -= 1;
    session.next_incoming_id = session.next_incoming_id.wrapping_add(1);
    Ok(())
}

/// The incoming link `handle` names; none for a link we detached (an error) while the
/// client's transfers were on their way, which are dropped.
fn incoming_link(
    session: &mut Session,
    channel: u16,
    handle: u32,
) -> Result<Option<&mut IncomingLink>, Fault> {
    match session.links.get_mut(&handle) {
        Some(Link::Incoming(link)) => Ok(Some(link)),
        Some(Link::Outgoing(_) | Link::Management(_)) => Err(link_error(
            channel,
            handle,
            condition::ILLEGAL_STATE,
            "transfer on a link the client receives on".into(),
        )),
        None if session.detached.contains(&handle) => Ok(None),
        None => Err(Fault::End(
            channel,
            AmqpError::new(
                condition::UNATTACHED_HANDLE,
                format!("Unattached link handle: {handle}"),
            ),
        )),
    }
}

/// Adds a transfer to its link's delivery: the whole delivery once its last transfer came,
/// none while more are due (or the client aborted it). The first transfer of a delivery
/// takes a unit of link credit.
fn assemble(
    link: &mut IncomingLink,
    channel: u16,
    transfer: &Transfer,
    payload: Bytes,
    max_size: u64,
) -> Result<Option<Delivered>, Fault> {
    let handle = transfer.handle;
    if link.assembly.is_none() {
        link.assembly = Some(first_transfer(link.credit, channel, transfer)?);
    }
    let assembly = link.assembly.as_mut().expect("invariant: set just above");
    if transfer.aborted {
        link.assembly = None;
        return Ok(None);
    }
    assembly.size += payload.len() as u64;
    if assembly.size > max_size {
        link.assembly = None;
        return Err(link_error(
            channel,
            handle,
            condition::MESSAGE_SIZE_EXCEEDED,
            format!("message size exceeds the maximum of {max_size} bytes"),
        ));
    }
    if transfer.settled == Some(true) {
        assembly.settled = true;
    }
    if transfer.more {
        assembly.chunks.push(payload);
        return Ok(None);
    }
    let assembly = link.assembly.take().expect("invariant: set above");
    link.credit = link.credit.saturating_sub(1);
    link.delivery_count = link.delivery_count.wrapping_add(1);
    Ok(Some(Delivered {
        delivery_id: assembly.delivery_id,
        settled: assembly.settled,
        raw: join(assembly.chunks, payload),
        target: link.target.clone(),
    }))
}

/// The assembly a delivery's first transfer starts: it needs link credit and a delivery-id.
fn first_transfer(credit: u32, channel: u16, transfer: &Transfer) -> Result<Assembly, Fault> {
    let handle = transfer.handle;
    if credit == 0 {
        return Err(link_error(
            channel,
            handle,
            condition::TRANSFER_LIMIT_EXCEEDED,
            "transfer without link credit: wait for a flow granting credit".into(),
        ));
    }
    let Some(delivery_id) = transfer.delivery_id else {
        return Err(link_error(
            channel,
            handle,
            condition::INVALID_FIELD,
            "the first transfer of a delivery has no delivery-id".into(),
        ));
    };
    Ok(Assembly {
        delivery_id,
        settled: transfer.settled.unwrap_or(false),
        chunks: Vec::new(),
        size: 0,
    })
}

fn link_error(channel: u16, handle: u32, condition: &str, text: String) -> Fault {
    Fault::Detach {
        channel,
        handle,
        error: AmqpError::new(condition, text),
    }
}

/// A message from the payloads of its transfers: `chunks` then `last`.
fn join(chunks: Vec<Bytes>, last: Bytes) -> Bytes {
    if chunks.is_empty() {
        return last;
    }
    // A message split over frames is joined once (its sections are decoded from one buffer);
    // single-frame messages stay zero-copy.
    let size = chunks.iter().map(Bytes::len).sum::<usize>() + last.len();
    let mut body = BytesMut::with_capacity(size);
    chunks.iter().for_each(|c| body.extend_from_slice(c));
    body.extend_from_slice(&last);
    body.freeze()
}
