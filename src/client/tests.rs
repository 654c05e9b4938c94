//! Unit tests of the client against fake servers (threads on loopback).
