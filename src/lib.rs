//! slipstream: a user-space transport stack over UDP that speaks SRT.
