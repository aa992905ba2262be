//! Unit tests of the store on a live server.
