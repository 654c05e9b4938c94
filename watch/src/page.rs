//! The web dashboard: one page and its script, embedded in the binary (no
//! CDN, nothing fetched from the internet), drawn by the browser from
//! `/api/queues`.

/// The page (`/`).
pub const INDEX: &str = include_str!("../web/index.html");
/// Its styles (`/app.css`).
pub const APP_CSS: &str = include_str!("../web/app.css");
/// Its script (`/app.js`): polls `/api/queues` every second, keeps the
/// last minutes of the chosen queues and draws them on canvases.
pub const APP_JS: &str = include_str!("../web/app.js");
