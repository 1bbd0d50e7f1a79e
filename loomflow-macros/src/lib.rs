//! Procedural macros for loomflow. Use them through the `loomflow` crate.
