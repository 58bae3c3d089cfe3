<?php
// Router for `php -S`: existing files (wp-cron.php, wp-login.php, assets) are served as they are; every other path
// goes to WordPress's front controller. Without it, php -S answers 404 for paths with a dot, like /wp-sitemap.xml.
$root = $_SERVER['DOCUMENT_ROOT'];
$path = rawurldecode((string) parse_url($_SERVER['REQUEST_URI'], PHP_URL_PATH));
if ($path !== '/' && is_file($root . $path)) {
    return false;
}
$_SERVER['SCRIPT_NAME'] = '/index.php';
$_SERVER['SCRIPT_FILENAME'] = $root . '/index.php';
require $root . '/index.php';
