<?php
/**
 * Plugin Name: sitedispatch
 * Description: What the sitedispatch WordPress driver needs from a site: fenced writes (a dispatcher write whose
 *   X-Sitedispatch-Fence is lower than the highest fence this site has seen is refused with HTTP 409), the source-guid
 *   meta that makes imports idempotent, due events run through an authenticated, fenced route, and one endpoint
 *   describing the site (version, permalinks, due events, a digest of everything a page renders from).
 *   The fence is the dispatcher's: only an authenticated user who may import (the `import` capability, which the
 *   dispatcher's application password must have) moves or is checked against it. On any other request the header is
 *   ignored: an anonymous request carrying a huge fence changes nothing (it would otherwise lock the dispatcher out).
 * Version: 1.1.0
 * License: MIT
 *
 * Install: copy this file to wp-content/mu-plugins/. It has no settings.
 */

if (!defined('ABSPATH')) {
    exit;
}

const SITEDISPATCH_FENCE_OPTION = 'sitedispatch_fence';
const SITEDISPATCH_FENCE_HEADER = 'HTTP_X_SITEDISPATCH_FENCE';
const SITEDISPATCH_SOURCE_META = 'sitedispatch_source';
const SITEDISPATCH_NAMESPACE = 'sitedispatch/v1';
const SITEDISPATCH_CAPABILITY = 'import';  // what the dispatcher does: import content, run the site's due events

/**
 * Compare-and-set on the highest fence seen: accept $fence when no higher one has been seen, and remember it.
 *
 * One conditional UPDATE in the database, so two PHP workers racing with fences 5 and 6 cannot both pass the check
 * and then both write: whichever order they run in, once 6 is stored, 5 is refused.
 *
 * @return array{0: bool, 1: int} [accepted, highest fence seen]
 */
function sitedispatch_accept_fence(int $fence): array
{
    global $wpdb;
    $table = $wpdb->options;
    // The row exists from the first fenced request on; INSERT IGNORE lets two first requests race safely.
    $wpdb->query($wpdb->prepare(
        "INSERT IGNORE INTO {$table} (option_name, option_value, autoload) VALUES (%s, '0', 'no')",
        SITEDISPATCH_FENCE_OPTION
    ));
    $moved = $wpdb->query($wpdb->prepare(
        "UPDATE {$table} SET option_value = %s WHERE option_name = %s AND CAST(option_value AS UNSIGNED) < %d",
        (string) $fence, SITEDISPATCH_FENCE_OPTION, $fence
    ));
    $highest = (int) $wpdb->get_var($wpdb->prepare(
        "SELECT option_value FROM {$table} WHERE option_name = %s", SITEDISPATCH_FENCE_OPTION
    ));
    wp_cache_delete(SITEDISPATCH_FENCE_OPTION, 'options');
    // Moved: ours is now the highest. Not moved: accepted only if ours is (still) the highest, i.e. equal.
    return [($moved > 0) || $highest === $fence, $highest];
}

/** The fence a request of the dispatcher carries, or null: when it carries none (people editing in wp-admin are
 * never fenced), or when whoever sent it is not a user who may do what the dispatcher does (anyone else's header
 * is ignored, never stored). Called once WordPress knows the request's user (REST authentication has run). */
function sitedispatch_request_fence(): ?int
{
    if (!isset($_SERVER[SITEDISPATCH_FENCE_HEADER]) || !current_user_can(SITEDISPATCH_CAPABILITY)) {
        return null;
    }
    $raw = trim((string) $_SERVER[SITEDISPATCH_FENCE_HEADER]);
    return ctype_digit($raw) ? (int) $raw : -1;  // malformed: lower than any fence, so refused
}

/** Refuse a stale or malformed fence: the refusal a REST write or a wp-cron.php run gets. */
function sitedispatch_fence_refusal(int $fence): ?WP_Error
{
    if ($fence < 1) {
        return new WP_Error('sitedispatch_bad_fence', 'X-Sitedispatch-Fence must be a positive integer',
            ['status' => 400]);
    }
    [$accepted, $highest] = sitedispatch_accept_fence($fence);
    if ($accepted) {
        return null;
    }
    return new WP_Error('sitedispatch_stale_fence',
        sprintf('fence %d is stale: this site has seen fence %d', $fence, $highest),
        ['status' => 409, 'fence' => $fence, 'highest' => $highest]);
}

// Every REST write carrying a fence is checked before it runs. Reads are never refused.
add_filter('rest_pre_dispatch', function ($result, $server, $request) {
    $fence = sitedispatch_request_fence();
    if ($fence === null || $result !== null || in_array($request->get_method(), ['GET', 'HEAD', 'OPTIONS'], true)) {
        return $result;
    }
    return sitedispatch_fence_refusal($fence) ?? $result;
}, 10, 3);

/**
 * Run the due events now, as wp-cron.php would (publishing scheduled posts, ...). The dispatcher calls this through
 * REST, authenticated and fenced (POST is checked in rest_pre_dispatch like any write), never through wp-cron.php,
 * which anyone may request and which authenticates no one: a fence header sent there is ignored.
 *
 * @return int the events run
 */
function sitedispatch_run_due_events(): int
{
    if (!defined('DOING_CRON')) {
        define('DOING_CRON', true);
    }
    $ran = 0;
    $now = microtime(true);
    foreach ((array) _get_cron_array() as $timestamp => $hooks) {
        if ($timestamp > $now) {
            break;
        }
        foreach ((array) $hooks as $hook => $events) {
            foreach ((array) $events as $event) {
                $args = $event['args'] ?? [];
                if (!empty($event['schedule'])) {
                    wp_reschedule_event($timestamp, $event['schedule'], $hook, $args);
                }
                wp_unschedule_event($timestamp, $hook, $args);
                do_action_ref_array($hook, $args);
                $ran++;
            }
        }
    }
    return $ran;
}

// The source key of an imported post or comment (WXR guid#post-ID, plus #comment-ID for a comment), writable
// through REST, so a retried import finds what an earlier attempt created.
add_action('init', function () {
    $args = ['type' => 'string', 'single' => true, 'show_in_rest' => true,
        'auth_callback' => function () {
            return current_user_can('edit_posts');
        }];
    foreach (['post', 'page', 'attachment'] as $type) {
        register_post_meta($type, SITEDISPATCH_SOURCE_META, $args);
    }
    register_meta('comment', SITEDISPATCH_SOURCE_META, $args);
});

// An import brings a post's comments with it, closed for new ones or not: a fenced request of a user who may
// moderate comments can add them (a visitor still cannot).
add_filter('comments_open', function ($open) {
    return $open || (defined('REST_REQUEST') && REST_REQUEST && sitedispatch_request_fence() !== null
            && current_user_can('moderate_comments'));
}, 10, 1);

/** Everything pages render from, as one digest: equal digests mean an equal site to publish. */
function sitedispatch_content_version(): string
{
    global $wpdb, $wp_version;
    $hash = hash_init('sha256');
    $parts = [
        "SELECT ID, post_type, post_status, post_modified_gmt, post_date_gmt, post_parent, menu_order
           FROM {$wpdb->posts} WHERE post_status IN ('publish', 'future', 'private', 'inherit') ORDER BY ID",
        "SELECT comment_ID, comment_post_ID, comment_approved FROM {$wpdb->comments} ORDER BY comment_ID",
        "SELECT t.term_id, t.name, t.slug, tt.taxonomy, tt.parent, tt.count FROM {$wpdb->terms} t
           JOIN {$wpdb->term_taxonomy} tt ON tt.term_id = t.term_id ORDER BY tt.term_taxonomy_id",
        "SELECT object_id, term_taxonomy_id FROM {$wpdb->term_relationships} ORDER BY object_id, term_taxonomy_id",
    ];
    foreach ($parts as $sql) {
        foreach ($wpdb->get_results($sql, ARRAY_N) as $row) {
            hash_update($hash, implode("\x1f", $row) . "\x1e");
        }
    }
    foreach (['blogname', 'blogdescription', 'permalink_structure', 'posts_per_page', 'show_on_front',
                 'page_on_front', 'page_for_posts', 'stylesheet', 'template', 'sticky_posts'] as $option) {
        hash_update($hash, $option . '=' . maybe_serialize(get_option($option)) . "\x1e");
    }
    hash_update($hash, (string) $wp_version);
    return hash_final($hash);
}

/** The site as the dispatcher needs it: one request. */
function sitedispatch_info(): array
{
    global $wp_version;
    $now = time();
    $next_due = null;
    $due = 0;
    foreach ((array) _get_cron_array() as $timestamp => $hooks) {
        $next_due = $next_due === null ? (int) $timestamp : min($next_due, (int) $timestamp);
        if ($timestamp <= $now) {
            $due += count((array) $hooks);
        }
    }
    $imported = [];
    global $wpdb;
    foreach ($wpdb->get_results($wpdb->prepare(
        "SELECT post_id, meta_value FROM {$wpdb->postmeta} WHERE meta_key = %s", SITEDISPATCH_SOURCE_META
    ), ARRAY_N) as [$id, $source]) {
        $imported[$source] = (int) $id;
    }
    foreach ($wpdb->get_results($wpdb->prepare(
        "SELECT comment_id, meta_value FROM {$wpdb->commentmeta} WHERE meta_key = %s", SITEDISPATCH_SOURCE_META
    ), ARRAY_N) as [$id, $source]) {
        $imported[$source] = (int) $id;
    }
    return [
        'plugin' => '1.1.0',
        'wordpress_version' => $wp_version,
        'home' => home_url('/'),
        'permalink_structure' => (string) get_option('permalink_structure'),
        'now' => $now,
        'next_due' => $next_due,
        'due_events' => $due,
        'fence' => (int) get_option(SITEDISPATCH_FENCE_OPTION, 0),
        'content_version' => sitedispatch_content_version(),
        'counts' => [
            'posts' => (int) wp_count_posts('post')->publish,
            'future' => (int) wp_count_posts('post')->future,
            'pages' => (int) wp_count_posts('page')->publish,
            'comments' => (int) wp_count_comments()->approved,
        ],
        'imported' => (object) $imported,
    ];
}

add_action('rest_api_init', function () {
    register_rest_route(SITEDISPATCH_NAMESPACE, '/cron', [
        'methods' => 'POST',
        'callback' => function () {
            return rest_ensure_response(['ran' => sitedispatch_run_due_events()]);
        },
        'permission_callback' => function () {
            return current_user_can(SITEDISPATCH_CAPABILITY);
        },
    ]);
    register_rest_route(SITEDISPATCH_NAMESPACE, '/info', [
        'methods' => 'GET',
        'callback' => function () {
            wp_cache_delete(SITEDISPATCH_FENCE_OPTION, 'options');
            return rest_ensure_response(sitedispatch_info());
        },
        'permission_callback' => function () {
            return current_user_can('edit_posts');
        },
    ]);
});
