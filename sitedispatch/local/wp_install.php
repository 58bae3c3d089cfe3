<?php
// Install one WordPress site without a browser (WP-CLI is not available here): run by `sitedispatch local wordpress
// up` as `php wp_install.php SITE_DIR TITLE ADMIN_EMAIL`. Prints one JSON line: the user and an application password.
if (PHP_SAPI !== 'cli' || $argc !== 4) {
    fwrite(STDERR, "usage: php wp_install.php SITE_DIR TITLE ADMIN_EMAIL\n");
    exit(2);
}
[, $site_dir, $title, $email] = $argv;
define('WP_INSTALLING', true);
$_SERVER['HTTP_HOST'] = parse_url(getenv('SITEDISPATCH_WP_HOME'), PHP_URL_HOST) . ':'
    . parse_url(getenv('SITEDISPATCH_WP_HOME'), PHP_URL_PORT);
require $site_dir . '/wp-load.php';
require_once ABSPATH . 'wp-admin/includes/upgrade.php';
require_once ABSPATH . 'wp-includes/class-wp-application-passwords.php';

$login = 'admin';
if (!is_blog_installed()) {
    $result = wp_install($title, $login, $email, true, '', wp_generate_password(24));
    if (is_wp_error($result)) {
        fwrite(STDERR, $result->get_error_message() . "\n");
        exit(1);
    }
}
update_option('template', 'twentytwentythree');
update_option('stylesheet', 'twentytwentythree');
update_option('permalink_structure', '/%year%/%monthnum%/%day%/%postname%/');
// No rewrite rules yet: the taxonomies of this process registered while permalinks were plain (no category or tag
// rules). The first request builds them with everything registered under the new structure.
delete_option('rewrite_rules');
$user = get_user_by('login', $login);
[$password] = WP_Application_Passwords::create_new_application_password($user->ID, ['name' => 'sitedispatch']);
echo json_encode(['user' => $login, 'application_password' => $password, 'user_id' => $user->ID]), "\n";
