//! rotor-selector: finds out-of-date nodes and marks them with the drain taint. (Work starts in issue 3.)
