//! The gateway's inner wire form, shared by the edge (`api`) and the core (`routing`).
//!
//! Inside, a request travels in the OpenAI chat shape: the client's own bytes when it sent that
//! dialect ([`chat::ChatRequest`], read shallowly and passed on with byte splices), or its body
//! translated once at the edge. Answers travel as OpenAI bodies and SSE chunks: [`sse`] frames
//! and decodes events, [`chunks`] reads chunks just enough to know where a stream stands, and
//! [`transcode`] converts to and from the other dialects through the canonical model. [`scan`]
//! reads the few fields the gateway needs from a plain JSON body without serde_json's cost. What a
//! target of the client's own dialect gets beyond that (the client's body as it came, its
//! protocol headers) is [`client::ClientWire`].

pub mod chat;
pub mod chunks;
pub mod client;
pub mod forms;
pub mod scan;
pub mod session;
pub mod sse;
pub mod trace;
pub mod transcode;

pub use chat::ChatRequest;
pub use chunks::Usage;
pub use client::ClientWire;
pub use forms::Forms;
