// The markdown bundle's entry: marked renders markdown to HTML and DOMPurify
// sanitizes that HTML; exposed to the page as window.AiodMarkdown (see
// build.mjs). The page itself configures both (web/static/markdown.js).
export { Marked } from 'marked';
export { default as DOMPurify } from 'dompurify';
