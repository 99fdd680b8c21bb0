/* rbtree.c — intrusive red-black tree of blocks keyed by (size, address).
 *
 * Why a balanced tree: best fit must not slow down as the number of free blocks grows (a linear
 * free list degrades ~17x at 10k blocks). A red-black tree bounds every operation by 2 log2 n.
 * Keys are unique because addresses are: the tie-break on address makes best fit deterministic
 * (lowest address among equal sizes), which replay needs.
 */
#include "alloc/internal.h"

static inline bool key_less(const blk_t *a, const blk_t *b)
{
    return a->size < b->size || (a->size == b->size && a->addr < b->addr);
}

static void rotate_left(rb_tree_t *t, rb_node_t *x)
{
    rb_node_t *y = x->right;
    x->right = y->left;
    if (y->left) y->left->parent = x;
    y->parent = x->parent;
    if (!x->parent)
        t->root = y;
    else if (x == x->parent->left)
        x->parent->left = y;
    else
        x->parent->right = y;
    y->left = x;
    x->parent = y;
}

static void rotate_right(rb_tree_t *t, rb_node_t *x)
{
    rb_node_t *y = x->left;
    x->left = y->right;
    if (y->right) y->right->parent = x;
    y->parent = x->parent;
    if (!x->parent)
        t->root = y;
    else if (x == x->parent->right)
        x->parent->right = y;
    else
        x->parent->left = y;
    y->right = x;
    x->parent = y;
}

void rb_insert(rb_tree_t *t, blk_t *b)
{
    rb_node_t *y = NULL, *x = t->root;
    bool left = false;
    while (x) {
        y = x;
        left = key_less(b, (blk_t *)x);
        x = left ? x->left : x->right;
    }
    rb_insert_at(t, b, (blk_t *)y, left);
}

void rb_insert_at(rb_tree_t *t, blk_t *b, blk_t *parent, bool left)
{
    rb_node_t *z = &b->rb, *y = parent ? &parent->rb : NULL;
    z->parent = y;
    z->left = z->right = NULL;
    z->red = 1;
    if (!y)
        t->root = z;
    else if (left)
        y->left = z;
    else
        y->right = z;
    t->count++;

    while (z->parent && z->parent->red) {
        rb_node_t *p = z->parent, *g = p->parent;
        if (p == g->left) {
            rb_node_t *u = g->right;
            if (u && u->red) {
                p->red = 0;
                u->red = 0;
                g->red = 1;
                z = g;
            } else {
                if (z == p->right) {
                    z = p;
                    rotate_left(t, z);
                    p = z->parent;
                }
                p->red = 0;
                g->red = 1;
                rotate_right(t, g);
            }
        } else {
            rb_node_t *u = g->left;
            if (u && u->red) {
                p->red = 0;
                u->red = 0;
                g->red = 1;
                z = g;
            } else {
                if (z == p->left) {
                    z = p;
                    rotate_right(t, z);
                    p = z->parent;
                }
                p->red = 0;
                g->red = 1;
                rotate_left(t, g);
            }
        }
    }
    /* the loop ends below a black parent, or at the root (which only then may be red): the
     * root is not read otherwise (a cold cache line in a large tree) */
    if (!z->parent) z->red = 0;
}

static void transplant(rb_tree_t *t, rb_node_t *u, rb_node_t *v)
{
    if (!u->parent)
        t->root = v;
    else if (u == u->parent->left)
        u->parent->left = v;
    else
        u->parent->right = v;
    if (v) v->parent = u->parent;
}

static void erase_fixup(rb_tree_t *t, rb_node_t *x, rb_node_t *parent)
{
    while (x != t->root && (!x || !x->red)) {
        if (x == parent->left) {
            rb_node_t *w = parent->right;
            if (w->red) {
                w->red = 0;
                parent->red = 1;
                rotate_left(t, parent);
                w = parent->right;
            }
            if ((!w->left || !w->left->red) && (!w->right || !w->right->red)) {
                w->red = 1;
                x = parent;
                parent = x->parent;
            } else {
                if (!w->right || !w->right->red) {
                    w->left->red = 0;
                    w->red = 1;
                    rotate_right(t, w);
                    w = parent->right;
                }
                w->red = parent->red;
                parent->red = 0;
                if (w->right) w->right->red = 0;
                rotate_left(t, parent);
                x = t->root;
                break;
            }
        } else {
            rb_node_t *w = parent->left;
            if (w->red) {
                w->red = 0;
                parent->red = 1;
                rotate_right(t, parent);
                w = parent->left;
            }
            if ((!w->left || !w->left->red) && (!w->right || !w->right->red)) {
                w->red = 1;
                x = parent;
                parent = x->parent;
            } else {
                if (!w->left || !w->left->red) {
                    w->right->red = 0;
                    w->red = 1;
                    rotate_left(t, w);
                    w = parent->left;
                }
                w->red = parent->red;
                parent->red = 0;
                if (w->left) w->left->red = 0;
                rotate_right(t, parent);
                x = t->root;
                break;
            }
        }
    }
    if (x) x->red = 0;
}

void rb_erase(rb_tree_t *t, blk_t *b)
{
    rb_node_t *z = &b->rb, *child, *parent;
    int color = z->red;
    if (!z->left) {
        child = z->right;
        parent = z->parent;
        transplant(t, z, child);
    } else if (!z->right) {
        child = z->left;
        parent = z->parent;
        transplant(t, z, child);
    } else {
        rb_node_t *y = z->right;
        while (y->left)
            y = y->left;
        color = y->red;
        child = y->right;
        if (y->parent == z) {
            parent = y;
        } else {
            parent = y->parent;
            transplant(t, y, y->right);
            y->right = z->right;
            y->right->parent = y;
        }
        transplant(t, z, y);
        y->left = z->left;
        y->left->parent = y;
        y->red = z->red;
    }
    t->count--;
    if (!color) erase_fixup(t, child, parent);
}

blk_t *rb_lower_bound(const rb_tree_t *t, uint64_t size)
{
    rb_node_t *x = t->root, *best = NULL;
    while (x) {
        if (((blk_t *)x)->size >= size) {
            best = x;
            x = x->left;
        } else {
            x = x->right;
        }
    }
    return (blk_t *)best;
}

blk_t *rb_first(const rb_tree_t *t)
{
    rb_node_t *x = t->root;
    if (!x) return NULL;
    while (x->left)
        x = x->left;
    return (blk_t *)x;
}

blk_t *rb_last(const rb_tree_t *t)
{
    rb_node_t *x = t->root;
    if (!x) return NULL;
    while (x->right)
        x = x->right;
    return (blk_t *)x;
}

blk_t *rb_next(const blk_t *b)
{
    const rb_node_t *x = &b->rb;
    if (x->right) {
        x = x->right;
        while (x->left)
            x = x->left;
        return (blk_t *)x;
    }
    while (x->parent && x == x->parent->right)
        x = x->parent;
    return (blk_t *)x->parent;
}
