//! Logging in and the first start, against a real metadata store in a temporary directory.

use super::*;

fn open(dir: &std::path::Path, bootstrap: &Bootstrap) -> Access {
    let store = crate::metadata::file::FileStore::open(dir).unwrap();
    Access::open(store, bootstrap).unwrap()
}

#[tokio::test]
async fn loopback_users_log_in_only_from_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let access = open(dir.path(), &Bootstrap::default());
    access
        .put_user("remote", Some("pw"), None, Vec::new())
        .await
        .unwrap();
    assert!(access.authenticate("PLAIN", "guest", "guest", true).is_ok());
    let refused = access
        .authenticate("PLAIN", "guest", "guest", false)
        .unwrap_err();
    assert_eq!(
        refused,
        "user 'guest' can only connect via localhost (loopback_users)"
    );
    assert!(access.authenticate("PLAIN", "remote", "pw", false).is_ok());
    let wrong = access
        .authenticate("PLAIN", "guest", "nope", true)
        .unwrap_err();
    assert!(
        wrong.starts_with("ACCESS_REFUSED - Login was refused"),
        "{wrong}"
    );
}

#[tokio::test]
async fn first_boot_gives_the_default_user_everything_in_the_default_vhost() {
    let dir = tempfile::tempdir().unwrap();
    let access = open(dir.path(), &Bootstrap::default());
    let grant = access.grant("guest", "/").unwrap();
    assert!(grant
        .check(Perm::Configure, ResourceKind::Queue, "q")
        .is_ok());
    assert_eq!(access.user("guest").unwrap().tags, ["administrator"]);
    // The file is written at once; a second open reads it rather than bootstrapping.
    access
        .put_user("x", Some("y"), None, Vec::new())
        .await
        .unwrap();
    drop(access);
    let other = Bootstrap {
        default_user: "admin".into(),
        ..Bootstrap::default()
    };
    let again = open(dir.path(), &other);
    assert!(again.user_exists("x") && again.user_exists("guest"));
    assert!(
        !again.user_exists("admin"),
        "bootstrap runs on first start only"
    );
}
