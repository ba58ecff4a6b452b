//! io_uring.
